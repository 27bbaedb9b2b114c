"""The federated loop. One round:

1. sample the cohort (seeded); choose the shared index set when masking;
2. broadcast: encode the model once, put it in the object store once, count it per receiving client;
3. without masking: each worker trains its clients and returns their ClientUpdate messages;
   with masking: advertise keys -> share keys -> masked input (training happens here) -> unmask, one
   call per worker per step, with injected dropouts; below t survivors the round aborts. A worker whose
   updates or masked vectors can exceed one chunk streams them in chunks (Ray streaming generators);
4. the server decodes and sums message by message, in client-id order, and applies the mean update;
5. evaluate on the test split and write the round's row.
"""
from __future__ import annotations

import os
import resource
import time
from collections import defaultdict

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

import secagg
from compression.countsketch import SketchAccumulator
from fl import environment, seeds
from fl.data import client_partitions, partition_summary
from fl.models import build_model, flatten_parameters, get_flat, set_flat
from fl.policy import linear_codec, make_index_policy, masks, shared_k
from fl.pool import make_pool, pool_size
from fl.results import RunLog
from fl.server import Broadcaster, MaskedAggregator, PlainAggregator
from fl.training import as_tensor, combine, evaluate, n_batches
from fl.worker import CHUNK_BYTES


def simulate(cfg, cfg_dict: dict, chash: str, log: RunLog, t_start: float, loading) -> pd.DataFrame:
    """Run a validated configuration that has no finished rows (fl.launch.run checks both) and return
    its per-round rows. `t_start` is when the run began starting up (Ray's start included); `loading`
    is the future of its dataset, loading in a thread while the pool's workers start."""
    run_id = log.run_id
    pool = make_pool(cfg, cfg_dict)
    threads = torch.get_num_threads()
    if cfg.backend == "ray":
        # The driver gets the cores the workers leave (at least one): its evaluation's extra threads
        # would otherwise spin on the workers' cores and hold one worker back every round.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - pool_size(cfg)))
    try:
        data = loading.result()  # a loading error is raised here, and the pool still closes
        pool.attach(data)
        return _run(cfg, cfg_dict, chash, run_id, log, pool, data, time.perf_counter() - t_start)
    finally:
        pool.close()
        torch.set_num_threads(threads)


def _run(cfg, cfg_dict, chash, run_id, log, pool, data, t_setup) -> pd.DataFrame:
    torch.manual_seed(cfg.seed)
    model = flatten_parameters(build_model(cfg.model, data.input_shape, data.num_classes).to(cfg.device))
    x_test, y_test = as_tensor(data.x_test, cfg.device), as_tensor(data.y_test, cfg.device)  # moved once
    weights = get_flat(model)
    length = len(weights)
    masked = masks(cfg)
    policy = make_index_policy(cfg, length)
    linear = linear_codec(cfg) if masked else None
    accumulator = SketchAccumulator(linear, length) if linear is not None else None  # FetchSGD server EF
    k = shared_k(cfg, length) if masked else length
    broadcaster = Broadcaster(cfg, length, [p.numel() for p in model.parameters()])
    size = pool_size(cfg)
    evaluator = Evaluator(pool, size, model, x_test, y_test, str(cfg.device))
    static = {
        "run_id": run_id, "config_hash": chash, "seed": cfg.seed, "dataset": cfg.dataset.name,
        "partition": cfg.dataset.partition, "model": cfg.model.name, "n_params": length,
        "num_clients": cfg.fl.num_clients, "clients_per_round": cfg.fl.clients_per_round,
        "compression": cfg.compression.name, "ratio": cfg.compression.ratio,
        "client_compression": cfg.compression.client, "server_compression": broadcaster.codec.name != "none",
        "error_feedback": cfg.compression.error_feedback, "secagg": cfg.secagg.name,
        **environment.describe(cfg.device, cfg.backend, size),
        "index_policy": policy.name if policy is not None else "sketch-codec (server top-k)" if linear else
        ("per-client" if cfg.compression.client and cfg.compression.name != "none" else "dense"),
    }
    last_sync: dict[int, int] = {}  # client -> last round it received a broadcast
    worker_round: dict[int, int] = {}  # worker -> last round whose broadcast it applied
    broadcast_sizes: list[int] = []
    rows = []
    aborted_rounds: list[int] = []  # masked rounds not applied: residuals staged in them are dropped
    log.start(cfg_dict)
    summary = partition_summary(data.y_train, client_partitions(cfg, data.y_train))
    summary.to_csv(log.dir / "partitions.csv")  # per-client sample and class counts, once per run
    tqdm.write(f"fedsqueeze: {cfg.fl.num_clients} clients ({cfg.dataset.partition}): samples "
               f"{summary['samples'].min()}-{summary['samples'].max()}, classes per client "
               f"{summary['classes'].min()}-{summary['classes'].max()}")
    try:
        # read every round, so as plain values: an OmegaConf lookup costs 8-18 us
        seed, device, rounds, eval_every = int(cfg.seed), str(cfg.device), int(cfg.fl.rounds), int(cfg.fl.eval_every)
        num_clients, clients_per_round = int(cfg.fl.num_clients), int(cfg.fl.clients_per_round)
        bar = tqdm(range(rounds), desc=f"fedsqueeze {chash}", unit="round", mininterval=0.5)
        for r in bar:
            t_round = time.perf_counter()
            row = dict(static, round=r, rejected=0, aborted=False, dropped=0, t_setup=t_setup if r == 0 else 0.0)
            for w in pool.revive():  # a worker that died is replaced (its clients' state is lost, as on a device)
                worker_round.pop(w, None)
            stats: dict[str, float] = defaultdict(float)
            cohort = seeds.cohort(seed, r, num_clients, clients_per_round)
            by_worker: dict[int, list[int]] = defaultdict(list)
            for cid in cohort:
                by_worker[cid % size].append(cid)  # sticky: a client's state stays with one worker

            positions, index_seed = policy.positions(r) if policy is not None else (None, 0)
            t0 = time.perf_counter()
            delta = broadcaster.sends_delta()
            # a worker that missed a broadcast gets the model before this round first (its own clients' view)
            stale = {w for w in by_worker if worker_round.get(w, -1) != r - 1}
            catchup = pool.put(broadcaster.catchup(r)) if delta and stale else None
            broadcast = broadcaster.encode(r, weights, positions, index_seed)
            stats["t_broadcast"] = time.perf_counter() - t0
            bytes_down, row["catchups"] = _broadcast_bytes(cohort, r, len(broadcast), delta, broadcast_sizes,
                                                           last_sync)
            ref = pool.put(broadcast)
            sync = Sync(ref, catchup, stale, worker_round, r)

            tally = Tally(row, stats, bytes_down)
            if masked:
                applied = _masked_round(cfg, pool, tally, r, chash, cohort, by_worker, sync, policy, k, positions,
                                        weights, aborted_rounds, accumulator)
                if not applied:
                    aborted_rounds.append(r)
            else:
                _plain_round(pool, tally, r, length, by_worker, sync, weights)
            t0 = time.perf_counter()
            if r % eval_every == 0 or r == rounds - 1:
                row["accuracy"], row["loss"] = evaluator(weights)
            stats["t_evaluate"] = time.perf_counter() - t0
            row.update(
                bytes_up=tally.up_payload + tally.up_protocol, bytes_up_payload=tally.up_payload,
                bytes_up_protocol=tally.up_protocol, bytes_up_sketch=tally.up_sketch,
                bytes_up_per_client=(tally.up_payload + tally.up_protocol) / len(cohort),
                bytes_down=tally.down, bytes_down_per_client=tally.down / len(cohort),
                t_round=time.perf_counter() - t_round, **stats)
            row["driver_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            log.write(row)
            rows.append(row)
            if "accuracy" in row:
                bar.set_postfix(acc=f"{row['accuracy']:.3f}", up=f"{row['bytes_up'] / 1e6:.2f}MB",
                                down=f"{tally.down / 1e6:.2f}MB", refresh=False)  # redrawn at most every 0.5 s
        bar.close()
    except BaseException as err:
        log.fail(f"{type(err).__name__}: {err}")  # a crashed cell is recorded beside its rows, never silent
        raise
    finally:
        log.close()
    frame = pd.DataFrame(rows)
    log.finish({"run_id": run_id, "rounds": len(rows), "final_accuracy": rows[-1].get("accuracy"),
                "bytes_up": int(frame["bytes_up"].sum()), "bytes_down": int(frame["bytes_down"].sum())})
    print(f"fedsqueeze: {len(rows)} rounds, final accuracy {rows[-1]['accuracy']:.4f}, "
          f"up {frame['bytes_up'].sum() / 1e6:.2f} MB, down {frame['bytes_down'].sum() / 1e6:.2f} MB -> {log.path}")
    return frame


class Evaluator:
    """Accuracy and loss on the test split. A split of one batch is evaluated on the driver; a larger one
    by all the workers in parallel, each a range of whole batches, summed in batch order: the same
    figures as one process evaluating it all."""

    def __init__(self, pool, size: int, model, x_test, y_test, device: str):
        self.pool, self.model, self.x, self.y, self.device = pool, model, x_test, y_test, device
        batches = n_batches(len(y_test))
        bounds = np.linspace(0, batches, min(size, batches) + 1).round().astype(int)
        self.ranges = {w: (int(a), int(b)) for w, (a, b) in enumerate(zip(bounds, bounds[1:]))}

    def __call__(self, weights: np.ndarray) -> tuple[float, float]:
        if len(self.ranges) < 2:
            set_flat(self.model, weights)
            return evaluate(self.model, self.x, self.y, self.device)
        ref = self.pool.put(weights)
        replies = self.pool.call("evaluate", {w: (ref, a, b) for w, (a, b) in self.ranges.items()})
        if any(reply is None for reply in replies.values()):  # a worker died: the driver evaluates it all
            set_flat(self.model, weights)
            return evaluate(self.model, self.x, self.y, self.device)
        return combine([batch for w in sorted(replies) for batch in replies[w]], len(self.y))


class Sync:
    """The round's broadcast as each worker needs it: with a catch-up first for a worker that missed one."""

    def __init__(self, ref, catchup, stale: set[int], worker_round: dict[int, int], round: int):
        self.ref, self.catchup, self.stale, self.worker_round, self.round = ref, catchup, stale, worker_round, round

    def args(self, w: int) -> tuple:
        """(broadcast, catch-up or None) for worker `w`, which is called now and so applies this round's."""
        self.worker_round[w] = self.round
        return self.ref, self.catchup if w in self.stale else None


class Tally:
    """What one round has counted so far: bytes per direction and kind, seconds, and the row."""

    def __init__(self, row: dict, stats: dict, down: int):
        self.row, self.stats, self.down = row, stats, down
        self.up_payload = self.up_protocol = self.up_sketch = 0

    def timed(self, key: str, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stats[key] += time.perf_counter() - t0


def _plain_round(pool, tally: Tally, r: int, length: int, by_worker, sync: Sync, weights: np.ndarray) -> None:
    """Without masking: each client's own codec; the server decodes and sums message by message, in
    client-id order (so the sum does not depend on the pool), taking the next client's message from
    its worker's replies when the sum reaches it. A worker whose messages can exceed one chunk streams
    them in chunks, so the server sums while the workers still train; otherwise one reply each."""
    # A worker's reply, bounded by dense messages (4 bytes an entry; top-k's bitmap at ratio near 1 adds n/8).
    calls = {}
    for w, clients in by_worker.items():
        ref, catchup = sync.args(w)
        calls[w] = (ref, r, clients, catchup)
    streams = _replies(pool, "plain_round", calls, by_worker, 4.125 * length + 256)
    agg = PlainAggregator(r, length)
    for cid, msg in _in_client_order(streams, by_worker, tally.stats):
        if msg is WORKER_DIED:  # its worker died before sending it
            tally.row["dropped"] += 1
            continue
        if msg is None:
            tally.row["rejected"] += 1
            continue
        tally.up_payload += len(msg)
        try:
            tally.timed("t_aggregate", agg.add, msg)
        except ValueError as err:  # malformed or non-finite: rejected, never aggregated
            tally.row["rejected"] += 1
            tqdm.write(f"round {r}: rejected update of client {cid}: {err}")
    update = agg.result()
    if update is not None:
        weights += update


def _masked_round(cfg, pool, tally: Tally, r: int, chash: str, cohort: list[int], by_worker, sync: Sync, policy,
                  k: int, positions: np.ndarray, weights: np.ndarray, aborted_rounds: list[int],
                  accumulator: SketchAccumulator | None) -> bool:
    """With masking: advertise keys -> share keys -> masked input -> unmask, one call per worker per
    step. Dropouts are injected before each of the last three steps (seeded); a worker that dies drops
    its clients. Returns whether the round was applied (False: aborted below t, model unchanged)."""
    row, stats = tally.row, tally.stats
    # The session binds the configuration (its hash, seed included), round and cohort: every round has its
    # own, and a rerun draws the same SecAgg+ graph (keyed by the session), so its bytes and accuracy repeat.
    session = secagg.session_id(chash, r, cohort)
    if accumulator is not None:  # a linear codec: the masked vector is its table
        sketch, cells = None, accumulator.table.size
    else:
        sketch = policy.sketch(r)
        cells = sketch.rows * sketch.cols if sketch is not None else 0
    agg = MaskedAggregator(cfg, session, cohort, k, cells)
    vanish = np.random.default_rng(np.random.SeedSequence([cfg.seed, r, 17]))
    alive = set(cohort)
    drops = {"advertise": 0, "share_keys": 0, "masked_input": 0, "unmask": 0}
    step_started: dict[str, float] = {}

    def call(method: str, args_for, step: str, message_bytes: float = 0.0):
        """Inject this step's dropouts, call the workers of the clients still alive, and yield their
        messages in client-id order as they arrive; a client whose message does not come is lost.
        With `message_bytes` (a bound per message) a worker whose messages can exceed one chunk
        streams them, so the server never holds all of a round's masked vectors."""
        nonlocal alive
        step_started[step] = time.perf_counter()
        if step != "advertise" and cfg.secagg.dropout > 0:
            gone = {c for c in sorted(alive) if vanish.random() < cfg.secagg.dropout}
            drops[step] += len(gone)
            alive -= gone
        called = {w: [c for c in cs if c in alive] for w, cs in by_worker.items()}
        calls = {w: a for w, cs in called.items() if (a := args_for(w, cs)) is not None}
        called = {w: called[w] for w in calls}
        lost = set()
        for cid, msg in _in_client_order(_replies(pool, method, calls, called, message_bytes), called, stats):
            if msg is None or msg is WORKER_DIED:
                lost.add(cid)
            else:
                yield cid, msg
        drops[step] += len(lost & alive)
        alive -= lost

    try:
        for cid, msg in call("advertise", lambda w, cs: (r, session, cohort, cs, agg.length, aborted_rounds),
                             "advertise"):
            tally.up_protocol += len(msg)
            tally.timed("t_aggregate", agg.add_keys, msg)
        roster = agg.roster()
        tally.down += len(roster) * len(alive)
        for cid, msg in call("share_keys", lambda w, cs: (roster, cs) if cs else None, "share_keys"):
            tally.up_protocol += len(msg)
            tally.timed("t_aggregate", agg.add_shares, msg)
        bundles = agg.bundles()
        tally.down += sum(len(b) for b in bundles.values())
        alive &= set(bundles)
        def masked_args(w, cs):
            if not cs:
                return None
            ref, catchup = sync.args(w)
            return ref, r, {c: bundles[c] for c in cs}, cs, catchup

        for cid, msg in call("masked_round", masked_args, "masked_input", 4.0 * agg.length + 256):
            tally.up_payload += len(msg)
            tally.timed("t_aggregate", agg.add, msg)
        request, survivors = agg.unmask_request()
        tally.up_sketch = 4 * cells * len(survivors)
        tally.down += len(request) * len(survivors)
        alive &= set(survivors)
        for cid, msg in call("unmask", lambda w, cs: (request, cs) if cs else None, "unmask"):
            tally.up_protocol += len(msg)
            tally.timed("t_aggregate", agg.add_unmask, msg)
        values, weight, table = tally.timed("t_unmask", agg.result)
    except secagg.RoundAborted as err:  # below t: nothing revealed, nothing applied; the run goes on
        row["aborted"] = True
        tqdm.write(f"round {r}: aborted: {err}")
        applied = False
    else:
        t0 = time.perf_counter()
        if accumulator is not None:  # mean table -> heavy hitters; what is not extracted stays for later
            accumulator.add(table.reshape(accumulator.table.shape) / weight)
            positions, values = accumulator.extract()
            weights[positions] += values
        else:
            weights[positions] += values
            policy.observe(r, positions, values, None if table is None else table.reshape(sketch.rows, sketch.cols))
        stats["t_decode"] += time.perf_counter() - t0
        applied = True
    steps = list(step_started) + ["end"]
    step_started["end"] = time.perf_counter()
    row.update({f"t_step_{a}": step_started[b] - step_started[a] for a, b in zip(steps, steps[1:])})
    row.update(dropped=sum(drops.values()), **{f"dropped_{step}": n for step, n in drops.items()},
               late_ignored=agg.state.late_ignored)
    return applied


WORKER_DIED = object()  # in place of a message: the client's worker died before sending it


def _replies(pool, method: str, calls: dict[int, tuple], clients: dict[int, list[int]], message_bytes: float):
    """Per worker, the items of its reply: lists of (client id, message or None), then its timings dict
    (None if it died). A worker whose messages (at most `message_bytes` each) can exceed one chunk
    streams them in chunks (`<method>_stream`); otherwise one plain call, ~1.5 ms cheaper a round."""
    if max((len(clients[w]) for w in calls), default=0) * message_bytes > CHUNK_BYTES:
        return pool.stream(f"{method}_stream", {w: (*args, CHUNK_BYTES) for w, args in calls.items()})
    return {w: iter([None] if reply is None else reply) for w, reply in pool.call(method, calls).items()}


def _in_client_order(streams: dict, clients: dict[int, list[int]], stats: dict):
    """(client id, message) for every client called, in client-id order (so sums and state do not depend
    on the pool), each taken from its worker's stream when the order reaches it: the server works on one
    message while the workers still produce the next. A message is None if the client sent nothing,
    WORKER_DIED if its worker died first. Workers' timings and state sizes are summed into `stats`."""
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
    """Peaks: the largest worker's; everything else adds up."""
    for key, value in worker_stats.items():
        stats[key] = max(stats[key], value) if key.endswith("_peak_mb") else stats[key] + value


def _broadcast_bytes(cohort, r, size, delta: bool, sizes, last_sync) -> tuple[int, int]:
    """Downlink bytes and how many clients got a catch-up: this broadcast per client, plus, when it is a
    delta, what a client that missed rounds must fetch first (the missed broadcasts, at most one dense
    model: the round-0 broadcast's size). A dense broadcast is the whole model: no catch-up."""
    total = catchups = 0
    for cid in cohort:
        missed = sizes[last_sync.get(cid, -1) + 1:r] if delta else []
        total += size + (min(sum(missed), sizes[0]) if missed else 0)
        catchups += bool(missed)
        last_sync[cid] = r
    sizes.append(size)
    return total, catchups
