"""A round without masking: each client sends its own codec's message (e.g. its top-k with error
feedback); the server decodes and sums them one at a time and applies the weighted mean."""
from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

import compression
from fl import wire
from fl.rounds.client import keep_residual, restore_refused, sync, timed_train
from fl.rounds.exchange import WORKER_DIED, Tally, exchange

# A worker trains this many bytes' worth of clients (their float32 updates) before it encodes their
# updates: numpy's encoding runs warm then, and the updates held at once stay bounded.
ENCODE_BATCH_BYTES = 4 << 20


# --- client half: run by a worker for its clients -----------------------------------------------

def client_round(worker, broadcast: bytes, round: int, clients: list[int], catchup: bytes | None,
                 unsummed: dict[int, list[int]], t: dict):
    """Train each client and yield (client id, ClientUpdate bytes, or None if it is not sent). `unsummed`: per
    round, the clients whose update the server refused (they take back their residual, or memory)."""
    restore_refused(worker, unsummed)
    t["t_sync"] += sync(worker, broadcast, round, catchup)
    batch = max(1, ENCODE_BATCH_BYTES // (4 * worker.plan.length))
    for start in range(0, len(clients), batch):
        trained = [(cid, *timed_train(worker, cid, round, t)) for cid in clients[start:start + batch]]
        yield from encode_updates(worker, trained, round, t)
    t.update(worker.stats())


def encode_updates(worker, trained: list[tuple[int, np.ndarray, int]], round: int, t: dict):
    plan = worker.plan
    for cid, update, n in trained:
        t1 = time.perf_counter()
        try:
            residual = None
            if plan.error_feedback or plan.memory:
                payload, residual = worker.feedback.encode(update, worker.residuals.get(cid))
            else:
                payload = plan.client_codec.encode(update)
            message = wire.encode_update(round, cid, plan.client_codec.name, plan.length, float(n), payload)
            if residual is not None:  # the old residual (memory), until the server is known to have summed this one
                worker.replaced[cid] = worker.residuals.get(cid)
                worker.replaced_round = round
                keep_residual(worker, cid, residual)
        except ValueError:  # NaN/Inf from a diverged client: never sent, never aggregated
            message = None
        t["t_encode"] += time.perf_counter() - t1
        yield cid, message


# --- server half: run by the driver ---------------------------------------------------------------

class PlainAggregator:
    """Weighted FedAvg of decoded client updates, summed one message at a time. Each message must name the
    round's codec and its sender, once: the server decodes with its own configured codec, so a payload
    cannot pick another codec's (or another sketch's) decoder and cost."""

    def __init__(self, round: int, length: int, codec: compression.Codec, max_payload: int | None = None):
        self.round, self.length, self.codec, self.max_payload = round, length, codec, max_payload
        self.total = np.zeros(length, np.float64)
        self.scratch = np.empty(length, np.float64)  # reused: no 8n-byte allocation per message
        self.weight = 0.0
        self.rejected = 0
        self.senders: dict[int, float] = {}  # client -> its weight

    def add(self, message: bytes, client_id: int) -> None:
        if client_id in self.senders:
            raise wire.WireError(f"client update: a second update from client {client_id} this round")
        msg = wire.decode_update(message, self.round, self.length, self.max_payload, self.codec.name, client_id)
        try:
            self.codec.check_sender(msg.payload, self.length)
            update = self.codec.decode(msg.payload, self.length)
        except ValueError:  # includes compression.DecodeError: a non-finite or malformed payload is never summed
            self.rejected += 1
            raise
        self.senders[client_id] = float(msg.weight)
        np.multiply(update, np.float64(msg.weight), out=self.scratch)  # in float64: weight * float64(update)
        self.total += self.scratch
        self.weight += msg.weight

    def result(self) -> np.ndarray | None:
        return None if self.weight == 0 else (self.total / self.weight).astype(np.float32)


def _payload_bound(codec, length: int) -> int | None:
    """The codec's stated size bound for `length` entries (None for a codec that states none)."""
    try:
        return int(codec.size(length))
    except NotImplementedError:
        return None


def run(server, pool, tally: Tally, r: int, by_worker: dict[int, list[int]], delivery, carried=None) -> None:
    """One exchange: the server sums the updates in client-id order as they arrive and applies their mean.
    A malformed or non-finite update is rejected and never aggregated; the round goes on without it.
    `carried`: the previous round's evaluation, which the workers run after training (fl.evaluation)."""
    length = server.plan.length
    by_worker = _vanish(server.plan, r, by_worker, tally)
    by_worker = _miss(server.plan.dropped_stragglers(r), by_worker, tally)
    calls = {}
    for w, clients in by_worker.items():
        ref, catchup = delivery.to(w)
        calls[w] = (ref, r, clients, catchup, server.unsummed)
    codec = server.plan.client_codec
    agg = PlainAggregator(r, length, codec, _payload_bound(codec, length))
    # a bound per message: dense is 4 bytes an entry, and top-k's bitmap near ratio 1 adds n/8
    for cid, msg in exchange(pool, client_round, calls, by_worker, tally, 4.125 * length + 256, carried):
        if msg is WORKER_DIED:
            tally.row["dropped"] += 1
            continue
        if msg is None:
            tally.row["rejected"] += 1
            continue
        tally.up_payload += len(msg)
        try:
            tally.timed("t_aggregate", agg.add, msg, cid)
        except ValueError as err:
            tally.row["rejected"] += 1
            tqdm.write(f"round {r}: rejected update of client {cid}: {err}")
            if server.plan.error_feedback or server.plan.memory:
                server.unsummed.setdefault(r, []).append(cid)  # its client takes back its old residual (memory)
    tally.timed("t_aggregate", server.apply_plain, agg)  # the mean and its step: the server's side too


def _miss(late: frozenset[int], by_worker: dict[int, list[int]], tally: Tally) -> dict[int, list[int]]:
    """Dropped stragglers (fl.straggler_policy=drop) miss the upload: counted as dropped, their update never sent
    (not trained here: nothing of theirs would reach the server)."""
    gone = late & {c for cs in by_worker.values() for c in cs}
    if not gone:
        return by_worker
    tally.row["dropped"] += len(gone)
    return {w: kept for w, cs in by_worker.items() if (kept := [c for c in cs if c not in gone])}


def _vanish(plan, r: int, by_worker: dict[int, list[int]], tally: Tally) -> dict[int, list[int]]:
    """Injected dropouts (`secagg.dropout`, `Plan.plain_dropouts`) vanish before their one upload. A worker left
    with no client is not called (and misses this broadcast)."""
    gone = plan.plain_dropouts(r, [c for cs in by_worker.values() for c in cs])
    if not gone:
        return by_worker
    tally.row["dropped"] += len(gone)
    return {w: kept for w, cs in by_worker.items() if (kept := [c for c in cs if c not in gone])}
