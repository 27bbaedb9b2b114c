"""What every client does in both kinds of round: take the broadcast into the model it trains from, and
add its error-feedback residual to its update (or, under fl.aggregation=memory, take its memory from it). The state
lives on the worker that owns the client."""
from __future__ import annotations

import math
import time

import numpy as np

import compression
from fl import wire


def sync(worker, broadcast: bytes, round: int, catchup: bytes | None = None) -> float:
    """Apply the round's broadcast to the reference weights once per round; returns seconds. A worker that
    missed broadcasts (idle in a round, or revived) is sent `catchup`, the dense model before this round,
    and applies it first: a delta on a stale model would train its clients from the wrong one."""
    if worker.synced_round == round:
        return 0.0
    t0 = time.perf_counter()
    length = worker.plan.length
    if catchup is not None:
        dense = wire.decode_broadcast(catchup, length)
        if dense.is_delta or dense.round != round - 1:
            raise wire.WireError(f"catch-up: round {dense.round} (delta {dense.is_delta}), expected a dense "
                                 f"model of round {round - 1}")
        worker.reference = compression.get(dense.codec)().decode(dense.payload, length).copy()
        worker.synced_round = round - 1
    msg = wire.decode_broadcast(broadcast, length)
    if msg.round != round:
        raise wire.WireError(f"model broadcast: round {msg.round}, expected {round}")
    if msg.is_delta and worker.synced_round != round - 1:
        raise wire.WireError(f"model broadcast: a delta for round {round} on a model of round "
                             f"{worker.synced_round}, and no catch-up")
    values = compression.get(msg.codec)().decode(msg.payload, length)
    if msg.is_delta:
        worker.reference += values
    else:
        worker.reference = values.copy()
    worker.index_set = wire.decode_index_set(msg)
    worker.synced_round = round
    return time.perf_counter() - t0


def update_norm(update: np.ndarray) -> float:
    """The L2 norm, summed in float64, where a finite float32 vector's cannot overflow (NaN/Inf if it is not
    finite); einsum casts in buffers, so no float64 copy of the update is made."""
    return math.sqrt(float(np.einsum("i,i->", update, update, dtype=np.float64)))


def clip_norm(update: np.ndarray, bound: float | None, norm: float | None = None) -> tuple[np.ndarray, bool]:
    """`update` scaled down to L2 norm `bound` if it is longer (DP-FedAvg's and TFF's clipping), and whether it
    was. A non-finite update is returned as it is, to be refused downstream: scaling must never turn an Inf into
    a number. `norm`: the update's, if already taken."""
    if bound is None:
        return update, False
    norm = update_norm(update) if norm is None else norm
    if not math.isfinite(norm) or norm <= bound:
        return update, False
    return (update * np.float32(bound / norm)).astype(update.dtype, copy=False), True


def timed_train(worker, cid: int, round: int, t: dict) -> tuple[np.ndarray, int]:
    """The client's update (local - reference) after local training, clipped to `fl.max_update_norm` if one
    is set (counted in the row's `clipped`), and its sample count. The largest finite norm before clipping goes
    to the row's `update_norm_max`: a measurement of the simulation, never sent, so that a bound can be chosen.
    The steps it trained go to the row's `local_steps`."""
    t0, steps = time.perf_counter(), worker.steps_trained
    update, n = worker.train(cid, round)
    t["t_train"] += time.perf_counter() - t0
    t["local_steps"] += worker.steps_trained - steps
    norm = update_norm(update)
    update, clipped = clip_norm(update, worker.plan.training.max_update_norm, norm)
    if math.isfinite(norm):
        t["update_norm_max"] = max(t["update_norm_max"], norm)
    if clipped:
        t["clipped"] += 1
    return update, n


def corrected_update(worker, cid: int, round: int, t: dict) -> tuple[np.ndarray, int]:
    """Train the client; what it encodes (its update plus its error-feedback residual, or its update less its
    memory under fl.aggregation=memory), and its sample count."""
    plan = worker.plan
    update, n = timed_train(worker, cid, round, t)
    held = worker.residuals.get(cid) if plan.error_feedback or plan.memory else None
    if held is None:
        return update, n
    t0 = time.perf_counter()
    corrected = update - held if plan.memory else update + held.astype(np.float32)
    t["t_encode"] = t.get("t_encode", 0.0) + time.perf_counter() - t0  # error feedback is encoding, as in plain rounds
    return corrected, n


def keep_residual(worker, cid: int, residual: np.ndarray) -> None:
    """Stored in `compression.residual_dtype`; in float16 an entry beyond its range saturates at +-65504 (as inf
    it would make every later update of the client non-finite, never sent again)."""
    dtype = np.dtype(worker.plan.residual_dtype)
    if dtype == np.float16:
        top = float(np.finfo(np.float16).max)
        residual = np.clip(residual, -top, top)
    worker.residuals[cid] = residual.astype(dtype, copy=False)


def restore_refused(worker, unsummed: dict[int, list[int]]) -> None:
    """A plain round's sender keeps its new residual (or, under fl.aggregation=memory, memory) at once and holds its
    old one until its worker is next called; a client whose update the server refused in that round (`unsummed`, per
    round) takes the old one back, so that its residual stays what the server's sum left out of its updates (its
    memory, what the sum holds of it), as a masked round's refused sender keeps its old one."""
    for cid in unsummed.get(worker.replaced_round, ()):
        if cid in worker.replaced:
            old = worker.replaced[cid]
            if old is None:
                worker.residuals.pop(cid, None)
            else:
                worker.residuals[cid] = old
    worker.replaced = {}


def forget_memories(worker, t: dict):
    """Client step under fl.aggregation=memory, after a worker died with its clients' memories: the server's sum
    no longer equals what clients hold, so it is reset and every client starts again from no memory."""
    worker.residuals.clear()
    worker.staged, worker.held, worker.replaced = {}, {}, {}
    return iter(())
