"""The federated loop: sample -> broadcast -> run the round -> apply -> evaluate -> log.

The cohort is drawn from a seeded generator and each client is owned by one worker (client id modulo the
pool size), so results do not depend on the number of workers. The round's kind (fl.rounds.plain or
fl.rounds.masked) owns both halves of its exchanges; the Server owns what persists between rounds.
With `fl.eval_overlap` a round's evaluation rides on the next round's training call (fl.evaluation) and
its row is written once that call is back: a round late, with the same figures.
"""
from __future__ import annotations

import contextlib
import math
import resource
import sys
import time
from collections import defaultdict

import numpy as np
import pandas as pd
from tqdm import tqdm

from fl import environment, seeds
from fl.config import check_weights
from fl.data import NUM_CLASSES
from fl.partitions import client_partitions, partition_summary
from fl.errors import ConfigError, Diverged
from fl.evaluation import CarriedEvaluation, Evaluator
from fl.plan import Plan, model_section
from fl.results import RunLog
from fl.rounds import client, masked, plain
from fl.rounds.exchange import Tally
from fl.runtime import warm
from fl.runtime.pool import make_pool, pool_size
from fl.scores import collapsed
from fl.server import Server


def simulate(cfg, cfg_dict: dict, chash: str, log: RunLog, t_start: float, loading,
             keep: bool = False) -> pd.DataFrame:
    """Run a validated configuration that has no finished rows (fl.launch.run checks both) and return
    its per-round rows. `t_start` is when the run began starting up (Ray's start included); `loading`
    is the future of its dataset, loading in a thread while the pool's workers start. `keep`: the pool
    comes from, and stays in, fl.runtime.warm (a sweep's next cell re-attaches it)."""
    pool = warm.pool(cfg, pool_size(cfg), lambda: make_pool(cfg)) if keep else make_pool(cfg)
    try:
        try:
            data = loading.result()  # a loading error is raised here, and the pool still closes
            summary = partition_summary(data.y_train, client_partitions(cfg, data.y_train))  # refused here
            check_weights(cfg, summary["samples"], len(data.y_train))
            # A worker builds the initial model: with Ray workers the driver never imports torch.
            initial = pool.initial_model(model_section(cfg), data.input_shape, data.num_classes, int(cfg.seed),
                                         str(cfg.device))
            plan = Plan.build(cfg, initial["sizes"], initial["shapes"])
            pool.attach(data, plan)
            evaluator = Evaluator(pool, pool_size(cfg), len(data.y_test))
            server = Server(plan, np.array(initial["weights"]))  # a writable copy of the worker's reply
        except ConfigError:  # refused input (data not found, a split it cannot give): nothing ran, nothing recorded
            raise
        except BaseException as err:  # recorded where its rows would be, as a crash in a round is (_run)
            log.fail(f"{type(err).__name__} before the first round: {err}")
            raise
        return _run(cfg, cfg_dict, chash, log, pool, plan, server, evaluator, summary, time.perf_counter() - t_start,
                    initial["torch"])
    finally:
        if not keep:
            pool.close()


def callers_torch_rng(cfg):
    """An inline run's workers seed torch's generators in this process (the initial model, each client): the
    caller's state is put back when the run ends, however it ends, so that a notebook's own draws after a run
    are those it would have made without it. A Ray run seeds its workers' processes only."""
    if cfg.backend != "inline":
        return contextlib.nullcontext()
    import torch

    device = torch.device(str(cfg.device))
    return torch.random.fork_rng(devices=None if device.type == "cuda" else [], device_type=device.type)


def _run(cfg, cfg_dict, chash, log, pool, plan, server, evaluator, summary, t_setup, torch_version) -> pd.DataFrame:
    size = pool_size(cfg)
    static = static_columns(cfg, plan, log.run_id, chash, size, torch_version)
    # read every round, so as plain values: an OmegaConf lookup costs microseconds
    seed, rounds, eval_every = int(cfg.seed), int(cfg.fl.rounds), int(cfg.fl.eval_every)
    overlap = bool(cfg.fl.eval_overlap)
    num_clients, clients_per_round = int(cfg.fl.num_clients), int(cfg.fl.clients_per_round)
    rows = []
    timeline = {}
    samples = summary["samples"].to_numpy()
    step_seconds = 0.0  # a minibatch step's seconds, last measured: 0 until then
    waiting = None  # (row, tally, cohort size, weights) of the round whose evaluation the next one carries
    carried = None
    held: dict[int, int] = {}  # worker -> bytes of client state it last reported (fl.rounds.exchange.Tally)
    peaks: dict[int, float] = {}  # worker -> its peak memory so far (MB; a revived worker's predecessor's counts)
    try:
        log.start(cfg_dict)  # inside: a file it cannot write is recorded as a crash in a round is
        summary.to_csv(log.dir / "partitions.csv")  # per-client sample and class counts, once per run
        tqdm.write(f"fedsqueeze: {num_clients} clients ({cfg.dataset.partition}): samples {summary['samples'].min()}-"
                   f"{summary['samples'].max()}, classes per client {summary['classes'].min()}-"
                   f"{summary['classes'].max()}")
        announce_residuals(plan, *residual_need(cfg, plan, size), local=cfg.backend != "ray" or not cfg.ray.address)
        timeline["rounds_started_at"] = time.time()  # wall clock (Unix seconds): start-up and exit are measured from it
        bar = tqdm(range(rounds), desc=f"fedsqueeze {chash}", unit="round", mininterval=0.5)
        for r in bar:
            t_round = time.perf_counter()
            row = dict(static, round=r, rejected=0, clipped=0, aborted=False, dropped=0,
                       t_setup=t_setup if r == 0 else 0.0)
            row["state_lost_bytes"] = replace_dead_workers(pool, server, size, r, held, timeline)
            stats: dict[str, float] = defaultdict(float, t_evaluate_carried=0.0, local_steps=0)  # in every row
            cohort = seeds.cohort(seed, r, num_clients, clients_per_round)
            by_worker: dict[int, list[int]] = defaultdict(list)
            for cid in cohort:
                by_worker[cid % size].append(cid)  # sticky: a client's state stays with one worker

            carried = None
            if waiting is not None:  # the last round's evaluation, shared out by this round's training load
                stragglers = plan.stragglers(r)  # their steps are drawn: a worker's load is what it will train
                # a plain round's dropouts are known now (a masked round draws its own step by step)
                gone = plan.plain_dropouts(r, cohort) if not plan.masked else frozenset()
                steps = {w: sum(plan.client_steps(c, r, int(samples[c]), stragglers) for c in cs if c not in gone)
                         for w, cs in by_worker.items()}
                # a worker with nothing to train (its clients all dropped stragglers or dropouts) is not called
                carried = CarriedEvaluation(evaluator, waiting[3], {
                    w: step_seconds * n for w, n in steps.items() if n or not any(steps.values())})
            t0 = time.perf_counter()
            delivery, down, row["catchups"] = server.broadcast(r, cohort, by_worker, pool.put)
            stats["t_broadcast"] = time.perf_counter() - t0
            tally = Tally(row, stats, down, held, peaks)
            if plan.masked:
                if not masked.run(server, pool, tally, r, chash, cohort, by_worker, delivery, log.run_id, carried):
                    server.aborted(r)
                    timeline.setdefault("aborted", []).append([r, tally.aborted_why])  # the rows say only that
            else:
                plain.run(server, pool, tally, r, by_worker, delivery, carried)
            if stats["t_train"] > 0 and stats["local_steps"] > 0:
                step_seconds = stats["t_train"] / stats["local_steps"]
            if waiting is not None:
                _log_evaluated(log, rows, bar, waiting, carried)
                waiting = None

            t0 = time.perf_counter()
            if r % eval_every == 0 or r == rounds - 1:
                if overlap and r < rounds - 1 and evaluator.batch_seconds > 0 and step_seconds > 0:
                    waiting = (row, tally, len(cohort), server.weights)  # carried by round r + 1
                else:
                    row.update(evaluator(server.weights)._asdict())
            stats["t_evaluate"] = time.perf_counter() - t0
            row["t_round"] = time.perf_counter() - t_round
            if waiting is None:
                _log(log, rows, bar, row, tally, len(cohort))
        bar.close()
        timeline["rounds_ended_at"] = time.time()
        if cfg.results.save_model:
            log.save_model(server.weights)
        log.close()  # here, not only below: rows that cannot reach the disk fail the run, with its note
    except BaseException as err:
        if waiting is not None and log.last_round == waiting[0]["round"]:  # interrupted just after writing it
            waiting = None
        if waiting is not None and isinstance(err, Diverged) and carried is not None:
            _log_evaluated(log, rows, bar, waiting, carried)  # the last finite model's evaluation came back
        elif waiting is not None:  # the round's row is kept, without the evaluation it was waiting for
            log_round(log, rows, *waiting[:3], waiting[0]["t_round"])
        log.fail(f"{type(err).__name__}: {err}")  # a crashed cell is recorded beside its rows, never silent
        raise
    finally:
        log.close()
    return finish(log, rows, timeline)


def replace_dead_workers(pool, server, size: int, r: int, held: dict[int, int], timeline: dict) -> int:
    """Replace the workers that died before round `r`; returns the bytes of client state lost with them (as their
    workers last reported it in `held`). Their clients' state is lost, as on a device; under fl.aggregation=memory
    every client's, as the server's sum held the lost memories."""
    revived = pool.revive()
    server.forget(revived)
    if revived:  # in done.json: these rows are not an undisturbed run's
        timeline.setdefault("workers_replaced", []).append([r, revived])
    lost = sum(held.pop(w, 0) for w in revived)
    if lost:
        tqdm.write(f"round {r}: worker(s) {revived} died and were replaced: their clients' state "
                   f"({lost} bytes of residuals, as last reported) is lost")
    if revived and server.memory is not None and server.memory.weight > 0:
        forget_memories(server, pool, size)
        lost += sum(held.values())  # every worker's memories, not only the dead one's
        held.update(dict.fromkeys(held, 0))
        timeline.setdefault("memory_resets", []).append(r)
        tqdm.write(f"round {r}: fl.aggregation=memory: the server's sum of memories held the lost clients' "
                   "memories, so it and every client's memory start again from none")
    return lost


def forget_memories(server, pool, size: int) -> None:
    """Reset fl.aggregation=memory after a worker died with its clients' memories: the server's sum held them and
    cannot take them out (under masking it never saw them apart). A control message of a few bytes, not counted."""
    server.memory.reset()
    pool.call(client.forget_memories, {w: () for w in range(size)})


def residual_need(cfg, plan: Plan, workers: int) -> tuple[int, int, int]:
    """The bytes of error-feedback residuals the run will hold by its last round: all workers', the largest
    worker's, and how many clients keep one. Known before round 0, as the cohorts are drawn from the seed: each
    client sampled in any round keeps one residual (`plan.length` entries of `compression.residual_dtype`) from
    then on, on the worker that owns it (client id modulo the pool size). A masked round's new residuals wait in
    float32, staged beside the old ones, until the round is applied, and a plain round's senders hold their old
    residuals (memories) until their worker is next called (fl.rounds.client.restore_refused): each worker's most
    clients in a round hold that second copy too. A client that drops out or whose update is refused
    keeps none that round, so there this is a bound. 0 where no client keeps a residual. A memory is kept as a
    residual is."""
    if not (plan.error_feedback or plan.memory):
        return 0, 0, 0
    seed, num_clients, per_round = int(cfg.seed), int(cfg.fl.num_clients), int(cfg.fl.clients_per_round)
    sampled: set[int] = set()
    staged = np.zeros(workers, np.int64)  # per worker, its most clients in one round that holds a second copy
    for r in range(int(cfg.fl.rounds)):
        cohort = seeds.cohort(seed, r, num_clients, per_round)
        sampled.update(cohort)
        staged = np.maximum(staged, np.bincount(np.array(cohort) % workers, minlength=workers))
    each = plan.length * np.dtype(plan.residual_dtype).itemsize
    second = plan.length * (4 if plan.masked else np.dtype(plan.residual_dtype).itemsize)  # masked: staged float32
    per_worker = np.bincount([cid % workers for cid in sampled], minlength=workers) * each + staged * second
    return int(per_worker.sum()), int(per_worker.max()), len(sampled)


def available_memory() -> int:
    """Bytes of memory available on this machine now (psutil's `available`: free plus reclaimable)."""
    import psutil

    return int(psutil.virtual_memory().available)


def announce_residuals(plan: Plan, total: int, largest: int, clients: int, local: bool) -> None:
    """Say at start-up what the clients' residuals will take by the last round, and warn where a run on this
    machine (`local`) needs more than the memory available now: such a run would otherwise die of a generic
    MemoryError rounds in, its work lost. Only a warning: swap, other machines and a scheduler's limits are the
    user's to weigh."""
    if not total:
        return
    kept = "memories" if plan.memory else "residuals"
    tqdm.write(f"fedsqueeze: client state: {clients} clients' {plan.residual_dtype} {kept} will reach "
               f"{total / 1e6:,.1f} MB by the last round (the largest worker's {largest / 1e6:,.1f} MB)")
    free = available_memory() if local else None
    if free is not None and total > free:
        fewer = "fewer fl.num_clients (or fl.rounds, where cohorts are partial)"
        if plan.memory:  # float16 is refused under memory, and the other settings leave every memory in place
            less = f"{fewer}: under fl.aggregation=memory each client sampled keeps a float32 memory, any codec"
        else:
            less = (f"compression.residual_dtype=float16 (halves the kept residuals), {fewer}, "
                    "compression.error_feedback=false, or a codec without residuals (qsgd)")
        print(f"fedsqueeze: warning: the clients' {kept} will reach {total / 1e6:,.1f} MB, more than the "
              f"{free / 1e6:,.1f} MB of memory available now: the run may die of a MemoryError rounds in. Less: {less}",
              file=sys.stderr)


def _log_evaluated(log: RunLog, rows: list, bar, waiting, carried: CarriedEvaluation) -> None:
    """The waiting row, with its evaluation carried by this round (and what did not come back evaluated now)."""
    row, tally, cohort_size, _ = waiting
    scores, seconds = carried.result()
    row.update(scores._asdict())
    tally.stats["t_evaluate"] += seconds
    tally.stats["t_evaluate_carried"] = carried.worker_seconds
    _log(log, rows, bar, row, tally, cohort_size)


def _log(log: RunLog, rows: list, bar, row: dict, tally: Tally, cohort_size: int) -> None:
    log_round(log, rows, row, tally, cohort_size, row["t_round"])
    if "accuracy" in row:
        bar.set_postfix(acc=f"{row['accuracy']:.3f}", up=f"{row['bytes_up'] / 1e6:.2f}MB",
                        down=f"{tally.down / 1e6:.2f}MB", refresh=False)  # redrawn at most every 0.5 s


def static_columns(cfg, plan: Plan, run_id: str, chash: str, size: int, torch_version: str) -> dict:
    """The columns every row of the run shares."""
    return {
        "run_id": run_id, "config_hash": chash, "seed": cfg.seed, "dataset": cfg.dataset.name,
        "partition": cfg.dataset.partition, "model": cfg.model.name, "n_params": plan.length,
        "num_clients": cfg.fl.num_clients, "clients_per_round": cfg.fl.clients_per_round,
        "compression": cfg.compression.name, "ratio": cfg.compression.ratio,
        "client_compression": cfg.compression.client, "server_compression": plan.broadcast_codec.name != "none",
        "error_feedback": plan.error_feedback,  # whether clients kept residuals, not the switch
        "aggregation": "memory" if plan.memory else "cohort",
        "secagg": cfg.secagg.name,
        **environment.describe(cfg.device, cfg.backend, size, torch_version), "index_policy": plan.index_policy_name,
        "field_bits": plan.masked_field_bits if plan.masked else "",
    }


def log_round(log: RunLog, rows: list, row: dict, tally: Tally, cohort_size: int, seconds: float) -> None:
    up = tally.up_payload + tally.up_protocol
    row.update(bytes_up=up, bytes_up_payload=tally.up_payload, bytes_up_protocol=tally.up_protocol,
               bytes_up_sketch=tally.up_sketch, bytes_up_per_client=up / cohort_size, bytes_down=tally.down,
               bytes_down_per_client=tally.down / cohort_size, t_round=seconds, **tally.stats)
    row["local_steps"] = int(row["local_steps"])  # summed over workers as floats, as the seconds are
    row["driver_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    log.write(row)
    rows.append(row)


def finish(log: RunLog, rows: list, timeline: dict | None = None) -> pd.DataFrame:
    """Close the run; its rows as rounds.csv holds them (every column, as a rerun that skips it returns them)."""
    try:
        frame = pd.DataFrame(rows)
        log.finish({"run_id": log.run_id, "rounds": len(rows), "final_accuracy": rows[-1].get("accuracy"),
                    "bytes_up": int(frame["bytes_up"].sum()), "bytes_down": int(frame["bytes_down"].sum()),
                    "started_at": log.started_at, **(timeline or {})})
    except BaseException as err:  # no done.json: the rows read as a killed run's unless the failure is recorded
        log.fail(f"{type(err).__name__} after the last round: {err}")
        raise
    print(f"fedsqueeze: {len(rows)} rounds, final accuracy {rows[-1]['accuracy']:.4f}, "
          f"up {frame['bytes_up'].sum() / 1e6:.2f} MB, down {frame['bytes_down'].sum() / 1e6:.2f} MB -> {log.path}")
    replaced = (timeline or {}).get("workers_replaced")
    if replaced:  # died, or killed as hung (ray.call_timeout_s); state is lost only where a replaced worker held some
        lost = int(frame["state_lost_bytes"].sum())
        state = (f"; their clients' state was lost ({lost} bytes of residuals in "
                 f"{int((frame['state_lost_bytes'] > 0).sum())} rounds; the state_lost_bytes column says which)"
                 if lost else "")
        print(f"fedsqueeze: warning: workers died or were killed as hung and were replaced before rounds "
              f"{', '.join(str(r) for r, _ in replaced)} (a death mid-round drops that round's clients of the worker: "
              "`dropped`; their residuals are lost: `state_lost_bytes`), so these rows may not be an undisturbed "
              f"run's, which a rerun into another results.dir gives; done.json lists them as workers_replaced{state}",
              file=sys.stderr)
    aborted = frame["aborted"].astype(bool)
    # every update of the cohort lost or refused (a plain round then applies nothing, and is not aborted)
    emptied = frame["rejected"] + frame["dropped"] >= frame["clients_per_round"]
    if aborted.all():  # the run is finished, but the model never moved: say so rather than let a 0.1 pass
        print(f"fedsqueeze: warning: every round aborted ({int(aborted.sum())} of {len(rows)}), so the model is the "
              "initial one; the dropped_* and rejected columns say which clients were lost at which step",
              file=sys.stderr)
    elif (aborted | emptied).all():
        print(f"fedsqueeze: warning: no round applied an update (in {int((emptied & ~aborted).sum())} of {len(rows)} "
              "every client's update was rejected or lost, the others aborted), so the model is the initial one; "
              "the dropped and rejected columns (and the log's `rejected` lines) say why", file=sys.stderr)
    loss = rows[-1].get("loss")
    # the last rounds that applied nothing: every update that arrived was refused (a diverged local training sends
    # none finite), or a masked round aborted (a client whose update is not finite leaves the round)
    refused = emptied & ~aborted & (frame["rejected"] > 0)
    idle = (refused | aborted).to_numpy()
    stalled = int(np.argmin(idle[::-1])) if not idle.all() else len(idle)  # the first False from the end
    if loss is not None and not np.isfinite(loss):  # finite weights whose outputs overflow: Diverged never fires
        print(f"fedsqueeze: warning: the final model's test loss is {loss}: its outputs overflow float32, so the run "
              "diverged though its weights stayed finite (its accuracy is that of non-finite outputs); the rejected "
              "column counts the non-finite client updates that followed. Lower fl.lr or fl.server_lr, or bound "
              "updates with fl.max_update_norm", file=sys.stderr)
    elif 0 < stalled < len(rows) and not (aborted | emptied).all():
        tail = slice(len(rows) - stalled, None)
        why = []
        if n := int(aborted.iloc[tail].sum()):
            why.append(f"{n} aborted: too few survivors or a failed protocol check (done.json's `aborted` says "
                       "which; the dropped_* and rejected columns, which clients were lost)")
        if n := int(refused.iloc[tail].sum()):
            why.append(f"in {n} every client's update that arrived was refused (the log's `rejected` lines say why)")
        advice = (" A non-finite update is a local training that diverged: lower fl.lr or fl.server_lr, or bound "
                  "updates with fl.max_update_norm" if frame["rejected"].iloc[tail].sum() > 0 else "")
        print(f"fedsqueeze: warning: the last {stalled} of {len(rows)} rounds applied no update ({'; '.join(why)}), "
              f"so the final model is round {len(rows) - stalled - 1}'s.{advice}", file=sys.stderr)
    classes = NUM_CLASSES[rows[-1]["dataset"]]
    guess = math.log(classes)  # the test loss of the uniform prediction
    top, spread = rows[-1].get("top_class_share"), rows[-1].get("logit_std")
    # one class for (nearly) every test image, from a model that moved: its output no longer depends on the image
    if top is not None and collapsed(top, spread) and not (aborted | emptied).all():
        print(f"fedsqueeze: warning: the final model gives one class to {top:.1%} of the test images, its logits "
              f"varying by {spread:.2g} (std across images): its features are likely dead (ReLUs that no image turns "
              "on), as after a first round that blew up at a high fl.lr. A bound near the honest updates' norms "
              "(fl.max_update_norm; the update_norm_max column) or a lower fl.lr avoids it; rerun with "
              "results.save_model=true and python -m experiments.activations <run dir> shows which layer died",
              file=sys.stderr)
    # a finite loss no lower than that: a divergence no other check sees (nothing refused, every number finite), or
    # no learning; a model that never moved is named above
    elif loss is not None and guess <= loss < float("inf") and not (aborted | emptied).all():
        print(f"fedsqueeze: warning: the final model's test loss {loss:.4g} is not below a uniform guess's "
              f"(ln {classes} = {guess:.3f}): it predicts no better than guessing each class "
              "equally (its training diverged, learned nothing, or is sure of wrong classes). If the loss grew over "
              "the rounds, lower fl.lr or fl.server_lr, or bound updates with fl.max_update_norm", file=sys.stderr)
    return log.read()
