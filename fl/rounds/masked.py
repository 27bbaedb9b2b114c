"""A masked round (Bonawitz et al. 2017): advertise keys -> share keys -> masked input -> unmask, one call
per worker per step. Every client masks the same layout (fl.rounds.layout): its error-corrected update at
the round's shared index set, or a linear codec's table; the server only ever learns the survivors' sum."""
from __future__ import annotations

import hashlib
import time

import numpy as np
from tqdm import tqdm

import secagg
from fl import wire
from fl.rounds.client import corrected_update, keep_residual, sync
from fl.rounds.exchange import REFUSED, WORKER_DIED, Tally, exchange
from fl.rounds.layout import MaskedLayout
from fl.seeds import client_seed

STEPS = ("advertise", "share_keys", "masked_input", "unmask")


# --- client half: run by a worker for its clients -----------------------------------------------

def advertise(worker, round: int, session: bytes, cohort: list[int], clients: list[int], masked_length: int,
              aborted_rounds: list[int], key_root: bytes, t: dict):
    """Step 1: two fresh key pairs per client. Residuals staged by this worker's last masked round are kept
    only if that round was applied (an aborted round sent nothing the model used); that round may be any
    earlier one, as a worker with no client in a round is not called."""
    if worker.staged_round not in aborted_rounds:
        for cid, residual in worker.staged.items():
            keep_residual(worker, cid, residual)
    worker.staged = {}
    t0 = time.perf_counter()
    config = worker.plan.round_config(session, cohort, masked_length)
    protocol = secagg.get(worker.plan.secagg)
    # keys seeded per (experiment, round, client): a rerun draws the same SecAgg+ graph (simulation only)
    worker.pending = {cid: protocol.Client(config, cid, key_seed=key_root + cid.to_bytes(8, "big")) for cid in clients}
    out = [(cid, wire.encode_advertise(client.advertise())) for cid, client in worker.pending.items()]
    t["t_mask"] += time.perf_counter() - t0
    yield from out


def _step(worker, clients: list[int], act, t: dict):
    """One protocol step per client; a client whose check fails sends nothing (drops out)."""
    t0 = time.perf_counter()
    out = []
    for cid in clients:
        try:
            out.append((cid, act(cid, worker.pending[cid])))
        except (secagg.ProtocolError, KeyError, wire.WireError):
            worker.pending.pop(cid, None)
            out.append((cid, None))
    t["t_mask"] += time.perf_counter() - t0
    return out


def share_keys(worker, roster: bytes, clients: list[int], t: dict):
    """Step 2: Shamir shares of each client's self-mask seed and mask key, encrypted per recipient."""
    roster_msg = wire.decode_roster(roster)
    yield from _step(worker, clients, lambda cid, c: wire.encode_share_keys(c.share_keys(roster_msg)), t)


def masked_input(worker, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int],
                 catchup: bytes | None, t: dict):
    """Step 3: train, take the update at the shared index set (or a linear codec's table), weight, quantize,
    sketch the residual, mask; yields (client id, MaskedInput bytes or None)."""
    plan = worker.plan
    t["t_sync"] += sync(worker, broadcast, round, catchup)
    worker.staged_round = round
    idx = worker.index_set
    sketch = worker.policy.sketch(round) if worker.policy is not None else None
    cells = worker.linear_cells if plan.linear is not None else sketch.rows * sketch.cols if sketch is not None else 0
    layout = MaskedLayout(plan, len(idx) if plan.linear is None else 0, cells)
    for cid in clients:
        corrected, n = corrected_update(worker, cid, round, t)
        t1 = time.perf_counter()
        rng = np.random.default_rng(client_seed(plan.training.seed, round, cid) ^ 0x5EC)
        w = min(n / worker.mean_samples, plan.max_weight)
        try:  # the quantizer refuses NaN/Inf in what it is given: a weighted value or sketch cell may overflow
            vector = _masked_vector(plan, layout, corrected, w, idx, sketch, rng, worker.staged, cid)
        except ValueError:  # the client refuses to send (nothing was staged): the round goes on without it
            worker.pending.pop(cid, None)
            t["t_encode"] += time.perf_counter() - t1
            yield cid, REFUSED
            continue
        t2 = time.perf_counter()
        try:
            bundle = wire.decode_share_bundle(bundles[cid])
            message = wire.encode_masked(worker.pending[cid].masked_input(bundle, vector))
        except (secagg.ProtocolError, KeyError, wire.WireError):
            worker.pending.pop(cid, None)
            worker.staged.pop(cid, None)
            message = None
        t["t_encode"] += t2 - t1
        t["t_mask"] += time.perf_counter() - t2
        yield cid, message
    t.update(worker.stats())


def _masked_vector(plan, layout: MaskedLayout, corrected: np.ndarray, w: float, idx, sketch, rng, staged: dict,
                   cid: int) -> np.ndarray:
    """The client's vector in the layout; its new residual is staged (kept once the round is applied)."""
    if not np.isfinite(corrected).all():
        raise ValueError("update is not finite")
    q_weight = layout.weight(w, rng)
    if plan.linear is not None:  # count sketch: the weighted update's table is the message
        return layout.join(None, q_weight, layout.sketch(plan.linear.sketch_table(corrected * w), rng))
    q_values, sent = layout.values(corrected[idx] * w, rng)  # float32: an overflow to inf is refused
    residual = None
    if plan.error_feedback or sketch is not None:
        residual = corrected.copy()
        residual[idx] -= sent / w  # clipping and rounding error stay in the residual
    q_sketch = layout.sketch(sketch.sketch(residual), rng) if sketch is not None else None
    if plan.error_feedback:
        staged[cid] = residual
    return layout.join(q_values, q_weight, q_sketch)


def unmask(worker, request: bytes, clients: list[int], t: dict):
    """Step 4: shares of b for survivors, of the mask key for dropped clients; the round's keys are dropped."""
    request_msg = wire.decode_unmask_request(request)
    out = _step(worker, clients, lambda cid, c: wire.encode_unmask_response(c.unmask(request_msg)), t)
    worker.pending = {}
    yield from out


# --- server half: run by the driver ---------------------------------------------------------------

class MaskedAggregator:
    """The mask protocol's server state machine (bytes in, bytes out) and the layout's dequantization."""

    def __init__(self, plan, session: bytes, cohort: list[int], layout: MaskedLayout):
        self.layout, self.length, self.peers = layout, layout.length, len(cohort)
        self.config = plan.round_config(session, cohort, self.length)
        self.state = secagg.get(plan.secagg).Server(self.config)

    def add_keys(self, message: bytes) -> None:
        self.state.receive_keys(wire.decode_advertise(message))

    def roster(self) -> bytes:
        return wire.encode_roster(self.state.roster())

    def add_shares(self, message: bytes) -> None:
        self.state.receive_shares(wire.decode_share_keys(message, self.peers))

    def bundles(self) -> dict[int, bytes]:
        """The encrypted shares addressed to each client that sent shares, as one message per client."""
        return {cid: wire.encode_share_bundle(b) for cid, b in self.state.bundles().items()}

    def add(self, message: bytes) -> None:
        self.state.add(wire.decode_masked(message, self.length))

    def unmask_request(self) -> tuple[bytes, tuple[int, ...]]:
        request = self.state.unmask_request()
        return wire.encode_unmask_request(request), request.survivors

    def add_unmask(self, message: bytes) -> None:
        self.state.receive_unmask(wire.decode_unmask_response(message, self.peers))

    def result(self) -> tuple[np.ndarray, float, np.ndarray | None]:
        """(mean update at the index set, summed weight, summed sketch or None); raises RoundAborted."""
        self.total = self.state.result()  # the field sum: all the server ever sees
        values, weight, cells = self.layout.unpack(self.total)
        if not weight > 0:
            raise secagg.RoundAborted(f"summed FedAvg weight {weight} is not positive")
        return values, weight, cells


class _Steps:
    """The clients still alive through a round's four steps, with its injected dropouts (seeded)."""

    def __init__(self, pool, tally: Tally, cohort: list[int], by_worker: dict[int, list[int]], dropout: float,
                 rng: np.random.Generator):
        self.pool, self.tally, self.by_worker, self.dropout, self.rng = pool, tally, by_worker, dropout, rng
        self.alive = set(cohort)
        self.drops = dict.fromkeys(STEPS, 0)
        self.started: dict[str, float] = {}

    def run(self, step, name: str, args_for, message_bytes: float = 0.0):
        """Inject this step's dropouts, call the workers of the clients still alive, and yield their messages
        in client-id order as they arrive; a client whose message does not come is lost."""
        self.started[name] = time.perf_counter()
        if name != "advertise" and self.dropout > 0:
            gone = {c for c in sorted(self.alive) if self.rng.random() < self.dropout}
            self.drops[name] += len(gone)
            self.alive -= gone
        called = {w: [c for c in cs if c in self.alive] for w, cs in self.by_worker.items()}
        calls = {w: a for w, cs in called.items() if (a := args_for(w, cs)) is not None}
        lost = set()
        for cid, msg in exchange(self.pool, step, calls, called, self.tally.stats, message_bytes):
            if msg is None or msg is WORKER_DIED:
                lost.add(cid)
            elif msg == REFUSED:  # its own update was invalid: rejected, never aggregated
                self.reject(cid)
            else:
                yield cid, msg
        self.drops[name] += len(lost & self.alive)
        self.alive -= lost

    def take(self, add, cid: int, msg: bytes) -> None:
        """Hand a client's message to the server's state machine; a malformed one (wrong session, bad
        encoding, failed checksum) rejects that client, and the round goes on without it."""
        try:
            self.tally.timed("t_aggregate", add, msg)
        except secagg.RoundAborted:
            raise
        except (secagg.ProtocolError, wire.WireError) as err:
            self.reject(cid)
            tqdm.write(f"rejected a message of client {cid}: {err}")

    def reject(self, cid: int) -> None:
        self.tally.row["rejected"] += 1
        self.alive.discard(cid)

    def finish(self, row: dict, late_ignored: int) -> None:
        names = list(self.started) + ["end"]
        self.started["end"] = time.perf_counter()
        row.update({f"t_step_{a}": self.started[b] - self.started[a] for a, b in zip(names, names[1:])})
        row.update(dropped=sum(self.drops.values()), **{f"dropped_{s}": n for s, n in self.drops.items()},
                   late_ignored=late_ignored)


def run(server, pool, tally: Tally, r: int, chash: str, cohort: list[int], by_worker: dict[int, list[int]],
        delivery, run_id: str) -> bool:
    """The server half of one masked round; returns whether it was applied (False: aborted below t, and
    the model is unchanged). A worker that dies drops its clients."""
    plan = server.plan
    layout = MaskedLayout(plan, plan.k, server.sketch_cells(r))
    # The session binds the experiment (its config hash), round, cohort, the round's protocol settings and a
    # nonce of this run: a message replayed from another run, round or configuration is refused.
    nonce = hashlib.sha256(f"{run_id}:{r}".encode()).digest()[:16]
    key_root = hashlib.sha256(f"fedsqueeze-keys:{chash}:{r}".encode()).digest()
    session = secagg.session_id(chash, r, cohort, protocol=plan.secagg, length=layout.length,
                                threshold=plan.threshold, degree=plan.neighbours, nonce=nonce)
    agg = MaskedAggregator(plan, session, cohort, layout)
    steps = _Steps(pool, tally, cohort, by_worker, plan.dropout,
                   np.random.default_rng(np.random.SeedSequence([plan.training.seed, r, 17])))
    try:
        for cid, msg in steps.run(advertise, "advertise",
                                  lambda w, cs: (r, session, cohort, cs, agg.length, server.aborted_rounds,
                                                 key_root)):
            tally.up_protocol += len(msg)
            steps.take(agg.add_keys, cid, msg)
        roster = agg.roster()
        tally.down += len(roster) * len(steps.alive)
        for cid, msg in steps.run(share_keys, "share_keys", lambda w, cs: (roster, cs) if cs else None):
            tally.up_protocol += len(msg)
            steps.take(agg.add_shares, cid, msg)
        bundles = agg.bundles()
        tally.down += sum(len(b) for b in bundles.values())
        steps.alive &= set(bundles)

        def masked_args(w, cs):  # (broadcast, round, bundles, clients, catch-up)
            if not cs:
                return None
            ref, catchup = delivery.to(w)
            return ref, r, {c: bundles[c] for c in cs}, cs, catchup

        for cid, msg in steps.run(masked_input, "masked_input", masked_args, 4.0 * agg.length + 256):
            tally.up_payload += len(msg)
            steps.take(agg.add, cid, msg)
        request, survivors = agg.unmask_request()
        tally.up_sketch = 4 * layout.cells * len(survivors)
        tally.down += len(request) * len(survivors)
        steps.alive &= set(survivors)
        for cid, msg in steps.run(unmask, "unmask", lambda w, cs: (request, cs) if cs else None):
            tally.up_protocol += len(msg)
            steps.take(agg.add_unmask, cid, msg)
        values, weight, cells = tally.timed("t_unmask", agg.result)
    except secagg.RoundAborted as err:  # below t: nothing revealed, nothing applied; the run goes on
        tally.row["aborted"] = True
        tqdm.write(f"round {r}: aborted: {err}")
        applied = False
    else:
        t0 = time.perf_counter()
        server.apply_masked(r, values, weight, cells)
        tally.stats["t_decode"] += time.perf_counter() - t0
        applied = True
    steps.finish(tally.row, agg.state.late_ignored)
    return applied
