"""Driver side of an exchange: one call per worker carrying all its clients, and the replies' messages
taken in client-id order, so sums and state never depend on the pool or on which worker answers first."""
from __future__ import annotations

import time

from fl.runtime.transport import CHUNK_BYTES
from fl.scores import EVALUATED, EVALUATED_SECONDS

WORKER_DIED = object()  # in place of a message: the client's worker died before sending it
REFUSED = b""  # a client's message when its own update was invalid (NaN/Inf, or too large to quantize)


class Tally:
    """What one round has counted so far: bytes per direction and kind, seconds, and the row. `held`: the
    run's last report of each worker's client state (bytes), kept across rounds, so the row's `state_bytes`
    covers every worker, not only those called this round; `peaks`: each worker's peak memory (MB) so far,
    kept likewise, so the row's `worker_peak_mb` is the largest worker's even in a round that does not call it."""

    def __init__(self, row: dict, stats: dict, down: int, held: dict[int, int], peaks: dict[int, float]):
        self.row, self.stats, self.down, self.held, self.peaks = row, stats, down, held, peaks
        self.stats["state_bytes"] = sum(self.held.values())
        if self.peaks:
            self.stats["worker_peak_mb"] = max(self.peaks.values())
        self.up_payload = self.up_protocol = self.up_sketch = 0
        self.aborted_why: str | None = None  # a masked round that aborted: why (done.json keeps it)

    def timed(self, key: str, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stats[key] += time.perf_counter() - t0


def exchange(pool, step, calls: dict[int, tuple], clients: dict[int, list[int]], tally: Tally,
             message_bytes: float = 0.0, carried=None):
    """Run the client step `step` on each worker of `calls` and yield (client id, message) for every client
    that `clients` lists for those workers (a worker not in `calls` is not called, and its clients not yielded),
    in client-id order. A message is None if the client sent nothing, WORKER_DIED if its worker died (or
    finished) without sending it. With `message_bytes` (a bound per message), when the most clients of any one
    worker can exceed one chunk every worker streams, so the server sums while the workers still produce, never
    holding them all.
    `carried` (a fl.evaluation.CarriedEvaluation): the previous round's evaluation, run by the workers after
    the step."""
    clients = {w: clients[w] for w in calls}
    spec = carried.spec if carried is not None else (lambda w: None)
    if max((len(cs) for cs in clients.values()), default=0) * message_bytes > CHUNK_BYTES:
        streams = pool.stream(step, calls, CHUNK_BYTES, carried=spec)
    else:  # one plain call: cheaper than a stream's chunk calls
        streams = {w: iter([None] if reply is None else reply)
                   for w, reply in pool.call(step, calls, carried=spec).items()}
    return _in_client_order(streams, clients, tally, carried)


def _in_client_order(streams: dict, clients: dict[int, list[int]], tally: Tally, carried=None):
    """Each message taken from its worker's stream when the order reaches it: the server works on one
    message while the workers still produce the next. Workers' timings go into the tally's stats, their state
    sizes into `tally.held`, the batches they evaluated to `carried`."""
    stats = tally.stats
    owner = {cid: w for w, cs in clients.items() for cid in cs}
    ready: dict[int, dict] = {w: {} for w in streams}
    open_streams = set(streams)

    def pull(w: int) -> None:
        item = next(streams[w], None)
        if isinstance(item, list):
            ready[w].update(item)
            return
        open_streams.discard(w)  # exhausted, died (None), or its closing timings
        if isinstance(item, dict):
            if EVALUATED in item:
                carried.take(w, item.pop(EVALUATED), item.pop(EVALUATED_SECONDS))
            if "state_bytes" in item:
                tally.held[w] = item.pop("state_bytes")
                stats["state_bytes"] = sum(tally.held.values())
            if "worker_peak_mb" in item:
                tally.peaks[w] = max(tally.peaks.get(w, 0.0), item.pop("worker_peak_mb"))
                stats["worker_peak_mb"] = max(tally.peaks.values())
            _add_stats(stats, item)

    for cid in sorted(owner):
        w = owner[cid]
        while cid not in ready[w] and w in open_streams:
            pull(w)
        yield cid, ready[w].pop(cid) if cid in ready[w] else WORKER_DIED
    for w in list(open_streams):  # the closing timings
        while w in open_streams:
            pull(w)


def _add_stats(stats: dict, worker_stats: dict) -> None:
    """Peaks and maxima: the largest worker's; everything else adds up."""
    for key, value in worker_stats.items():
        stats[key] = max(stats[key], value) if key.endswith(("_peak_mb", "_max")) else stats[key] + value
