"""A masked round (Bonawitz et al. 2017): advertise keys -> share keys -> masked input -> unmask, one call
per worker per step. Every client masks the same layout (fl.rounds.layout): its error-corrected update at
the round's shared index set, or a linear codec's table; the server only ever learns the survivors' sum."""
from __future__ import annotations

import functools
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
# Index policy `fresh`: a first masked exchange of sketches chooses this round's index set, a second masks the values.
FRESH_STEPS = ("advertise", "share_keys", "masked_sketch", "unmask_sketch", "masked_input", "unmask")


# --- client half: run by a worker for its clients -----------------------------------------------

def advertise(worker, round: int, sessions: list[bytes], cohort: list[int], clients: list[int],
              lengths: list[int], aborted_rounds: list[int], unsummed: dict[int, list[int]], key_roots: list[bytes],
              t: dict):
    """Step 1: two fresh key pairs per client and masked exchange (one exchange, or two under `fresh`: the
    exchanges are separate protocol instances, so one's dropouts never reveal the other's masks). Residuals
    staged by this worker's last masked round are kept only if that round was applied and the client's values
    were in its sum (`unsummed`: per applied round, the clients whose masked values the server refused); that
    round may be any earlier one, as a worker with no client in a round is not called."""
    if worker.staged_round not in aborted_rounds:
        refused = set(unsummed.get(worker.staged_round, ()))
        for cid, residual in worker.staged.items():
            if cid not in refused:
                keep_residual(worker, cid, residual)
    worker.staged, worker.held = {}, {}
    t0 = time.perf_counter()
    protocol = secagg.get(worker.plan.secagg)
    # keys seeded per (experiment, round, exchange, client): a rerun draws the same SecAgg+ graph (simulation only)
    worker.pending = [{cid: protocol.Client(worker.plan.round_config(session, cohort, n), cid,
                                            key_seed=root + cid.to_bytes(8, "big")) for cid in clients}
                      for session, n, root in zip(sessions, lengths, key_roots)]
    out = [(cid, together([wire.encode_advertise(p[cid].advertise()) for p in worker.pending])) for cid in clients]
    t["t_mask"] += time.perf_counter() - t0
    yield from out


def _step(worker, clients: list[int], act, t: dict, exchange: int | None = None, leave: bool = True):
    """One protocol step per client: in every exchange (a tuple of messages), or in one. A client whose check
    fails in any sends nothing and leaves the round (drops out); with `leave=False` it only sends nothing."""
    t0 = time.perf_counter()
    out = []
    for cid in clients:
        try:
            if exchange is None:
                out.append((cid, together([act(e, p[cid]) for e, p in enumerate(worker.pending)])))
            else:
                out.append((cid, act(exchange, worker.pending[exchange][cid])))
        except (secagg.ProtocolError, KeyError, wire.WireError):
            if leave:
                _leave(worker, cid)
            out.append((cid, None))
    t["t_mask"] += time.perf_counter() - t0
    return out


def together(messages: list[bytes]) -> bytes:
    """One protocol message per exchange in one reply: the message itself when there is one exchange, else each
    after its 4-byte length (a transport frame: the bytes counted are the messages')."""
    if len(messages) == 1:
        return messages[0]
    return b"".join(len(m).to_bytes(4, "little") + m for m in messages)


def apart(data: bytes, count: int) -> list[bytes]:
    """The messages `together` framed; WireError if the frame does not hold exactly `count` of them."""
    if count == 1:
        return [data]
    out, at = [], 0
    while at < len(data) and len(out) < count:
        size = int.from_bytes(data[at:at + 4], "little")
        if at + 4 + size > len(data):
            break
        out.append(data[at + 4:at + 4 + size])
        at += 4 + size
    if len(out) != count or at != len(data):
        raise wire.WireError(f"a reply of {len(data)} bytes does not frame {count} protocol messages")
    return out


def _leave(worker, cid: int) -> None:
    for p in worker.pending:
        p.pop(cid, None)
    worker.staged.pop(cid, None)
    worker.held.pop(cid, None)


def share_keys(worker, rosters: tuple[bytes, ...], clients: list[int], t: dict):
    """Step 2: Shamir shares of each client's self-mask seed and mask key, encrypted per recipient. A roster
    that does not decode is each client's refusal (it drops out), as any message it cannot check."""
    roster = functools.cache(lambda e: wire.decode_roster(rosters[e]))  # once per exchange, inside _step's checks
    yield from _step(worker, clients, lambda e, c: wire.encode_share_keys(c.share_keys(roster(e))), t)


def _mask(worker, exchange: int, cid: int, bundle: bytes, vector: np.ndarray, bits: int, t: dict):
    """The client's MaskedInput bytes for one exchange, or None (it drops out) if the protocol refuses."""
    t0 = time.perf_counter()
    try:
        message = wire.encode_masked(worker.pending[exchange][cid].masked_input(wire.decode_share_bundle(bundle),
                                                                                vector), bits)
    except (secagg.ProtocolError, KeyError, wire.WireError):
        _leave(worker, cid)
        message = None
    t["t_mask"] += time.perf_counter() - t0
    return message


def _refuse(worker, cid: int):
    """The client refuses to send (its update or a quantity it would mask is not finite): it leaves the round."""
    _leave(worker, cid)
    return cid, REFUSED


def masked_input(worker, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int],
                 catchup: bytes | None, t: dict):
    """Step 3 (one exchange): train, take the update at the broadcast's index set (or a linear codec's table),
    weight, quantize, sketch the residual, mask; yields (client id, MaskedInput bytes or None)."""
    plan = worker.plan
    t["t_sync"] += sync(worker, broadcast, round, catchup)
    worker.staged_round = round
    idx = worker.index_set
    sketch = worker.policy.sketch(round) if worker.policy is not None else None
    if plan.linear is not None:
        layout = MaskedLayout(plan, 0, worker.linear_cells, plan.linear_bits, plan.linear_clip)
    else:
        layout = MaskedLayout(plan, len(idx), sketch.rows * sketch.cols if sketch is not None else 0)
    for cid in clients:
        corrected, n = corrected_update(worker, cid, round, t)
        rng = np.random.default_rng(client_seed(plan.training.seed, round, cid) ^ 0x5EC)
        w = min(n / worker.mean_samples, plan.max_weight)
        # the quantizer refuses NaN/Inf in what it is given: a weighted value or sketch cell may overflow
        yield _send(worker, 0, cid, bundles[cid], layout.bits, t,
                    lambda: _masked_vector(plan, layout, corrected, w, idx, sketch, rng, worker, cid))
    t.update(worker.stats())


def _send(worker, exchange: int, cid: int, bundle: bytes, bits: int, t: dict, build):
    """(cid, message): the vector `build()` makes (timed as encoding), masked; REFUSED if the client refuses
    to build it (ValueError: not finite, or too large to quantize), and it leaves the round."""
    t0 = time.perf_counter()
    try:
        vector = build()
    except ValueError:
        t["t_encode"] += time.perf_counter() - t0
        return _refuse(worker, cid)
    t["t_encode"] += time.perf_counter() - t0
    return cid, _mask(worker, exchange, cid, bundle, vector, bits, t)


def masked_sketch(worker, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int],
                  catchup: bytes | None, t: dict):
    """Exchange 1 of `fresh`: train, and mask the summary (compression.fresh_summary: marginals, block energies, count
    sketch, the update itself or its squares) of the weighted error-corrected update, and a unit weight; the update
    is held for exchange 2, which masks its values and its weight at the positions the summed summary picks. The
    weight slot's sum counts the clients summed: the client's own weight goes only into exchange 2, so the two sums
    never differ by it."""
    plan = worker.plan
    t["t_sync"] += sync(worker, broadcast, round, catchup)
    worker.staged_round = round
    sketch = worker.policy.sketch(round)
    layout = MaskedLayout(plan, 0, sketch.rows * sketch.cols, plan.sketch_bits)

    def summary(cid, corrected, w, rng):
        if not np.isfinite(corrected).all():
            raise ValueError("update is not finite")
        vector = layout.join(None, layout.weight(1.0, rng), layout.table(sketch.sketch(corrected * w), rng))
        worker.held[cid] = (corrected, w)
        return vector

    for cid in clients:
        corrected, n = corrected_update(worker, cid, round, t)
        rng = np.random.default_rng(client_seed(plan.training.seed, round, cid) ^ 0x5EC5)
        w = min(n / worker.mean_samples, plan.max_weight)
        yield _send(worker, 0, cid, bundles[cid], layout.bits, t, lambda: summary(cid, corrected, w, rng))
    t.update(worker.stats())


def masked_values(worker, index_set: bytes, round: int, bundles: dict[int, bytes], clients: list[int], t: dict):
    """Exchange 2 of `fresh`: the held update's weighted values at this round's index set, masked; the
    rest (and the quantization error) is the client's new residual, staged until the round is applied. The index
    set must name the session the clients hold for this exchange (one replayed from another round is refused)."""
    plan = worker.plan
    layout = MaskedLayout(plan, plan.k, 0)
    session = next((worker.pending[1][cid].config.session for cid in clients if cid in worker.pending[1]), None)
    try:
        if session is None:  # every client of the call has left the round
            raise wire.WireError("no client left to take the index set")
        idx = wire.decode_round_index(index_set, session, plan.length, plan.k)
    except wire.WireError:
        for cid in clients:
            _leave(worker, cid)
        yield from ((cid, None) for cid in clients)
        return
    for cid in clients:
        if cid not in worker.held:
            yield cid, None
            continue
        corrected, w = worker.held.pop(cid)
        rng = np.random.default_rng(client_seed(plan.training.seed, round, cid) ^ 0x5EC)
        yield _send(worker, 1, cid, bundles[cid], layout.bits, t,
                    lambda: _masked_vector(plan, layout, corrected, w, idx, None, rng, worker, cid))


def _masked_vector(plan, layout: MaskedLayout, corrected: np.ndarray, w: float, idx, sketch, rng, worker,
                   cid: int) -> np.ndarray:
    """The client's vector in the layout; its new residual (or memory) is staged (kept once the round is applied).
    Under fl.aggregation=memory the weight slot carries the client's weight only while it has no memory: the server's
    summed weight is then that of every client its sum of memories holds."""
    if not np.isfinite(corrected).all():
        raise ValueError("update is not finite")
    memory = worker.residuals.get(cid) if plan.memory else None
    q_weight = layout.weight(0.0 if memory is not None else w, rng)
    if plan.linear is not None:  # a linear codec: the weighted update's table is the message
        return layout.join(None, q_weight, layout.table(plan.linear.masked_table(corrected * w), rng))
    q_values, sent = layout.values(corrected[idx] * w, rng)  # float32: an overflow to inf is refused
    residual = None
    if plan.error_feedback or sketch is not None:
        residual = corrected.copy()
        residual[idx] -= sent / w  # clipping and rounding error stay in the residual
    q_sketch = layout.table(sketch.sketch(residual), rng) if sketch is not None else None
    if plan.error_feedback:
        worker.staged[cid] = residual
    elif plan.memory:
        remembered = np.zeros_like(corrected) if memory is None else memory.copy()
        remembered[idx] += sent / w
        worker.staged[cid] = remembered
    return layout.join(q_values, q_weight, q_sketch)


def unmask(worker, request: bytes, clients: list[int], exchange: int, t: dict):
    """Step 4 (per exchange): shares of b for survivors, of the mask key for dropped clients; the exchange's
    keys are dropped. A client that cannot check the request sends nothing, but its masked input is in the
    survivors' sum the server unmasks with the others' shares: its residual stays staged, as a dropout's here."""
    request_msg = functools.cache(lambda: wire.decode_unmask_request(request))  # once, inside _step's checks
    out = _step(worker, clients, lambda e, c: wire.encode_unmask_response(c.unmask(request_msg())), t, exchange,
                leave=False)
    worker.pending[exchange] = {}
    yield from out


# --- server half: run by the driver ---------------------------------------------------------------

class MaskedAggregator:
    """The mask protocol's server state machine (bytes in, bytes out) and the layout's dequantization."""

    def __init__(self, plan, session: bytes, cohort: list[int], layout: MaskedLayout, sums: bool = False):
        self.layout, self.length, self.peers, self.session = layout, layout.length, len(cohort), session
        self.sums = sums  # fl.aggregation=memory: the summed values, and a weight that may be 0
        self.config = plan.round_config(session, cohort, self.length)
        self.state = secagg.get(plan.secagg).Server(self.config)

    def add_keys(self, message: bytes, sender: int) -> None:
        self.state.receive_keys(_from(wire.decode_advertise(message), sender))

    def roster(self) -> bytes:
        return wire.encode_roster(self.state.roster())

    def add_shares(self, message: bytes, sender: int) -> None:
        self.state.receive_shares(_from(wire.decode_share_keys(message, self.peers), sender))

    def bundles(self) -> dict[int, bytes]:
        """The encrypted shares addressed to each client that sent shares, as one message per client."""
        return {cid: wire.encode_share_bundle(b) for cid, b in self.state.bundles().items()}

    def add(self, message: bytes, sender: int) -> None:
        self.state.add(_from(wire.decode_masked(message, self.length, self.layout.bits), sender))

    def unmask_request(self) -> tuple[bytes, tuple[int, ...]]:
        request = self.state.unmask_request()
        return wire.encode_unmask_request(request), request.survivors

    def add_unmask(self, message: bytes, sender: int) -> None:
        self.state.receive_unmask(_from(wire.decode_unmask_response(message, self.peers), sender))

    def result(self) -> tuple[np.ndarray, float, np.ndarray | None]:
        """(mean update at the index set, or its sum with `sums`; summed weight; summed sketch or None); raises
        RoundAborted."""
        self.total = self.state.result()  # the field sum: all the server ever sees
        values, weight, cells = self.layout.unpack(self.total, mean=not self.sums)
        if not self.sums and not weight > 0:
            raise secagg.RoundAborted(f"summed FedAvg weight {weight} is not positive")
        return values, weight, cells


def _from(message, sender: int):
    """`message` if it names the client whose transport delivered it, as a plain round's update must: one
    client's message under another's id would stand in for (or block) that client's."""
    if message.client_id != sender:
        raise wire.WireError(f"{type(message).__name__}: from client {message.client_id}, but sent by client {sender}")
    return message


class _Steps:
    """The clients still alive through a round's steps (STEPS, or FRESH_STEPS under `fresh`), with its injected
    dropouts (seeded)."""

    def __init__(self, pool, tally: Tally, cohort: list[int], by_worker: dict[int, list[int]], dropout: float,
                 rng: np.random.Generator, names=STEPS, late: frozenset[int] = frozenset()):
        self.pool, self.tally, self.by_worker, self.dropout, self.rng = pool, tally, by_worker, dropout, rng
        self.late, self.upload = late, names[2]  # dropped stragglers miss the first upload of a trained update
        self.alive = set(cohort)
        self.drops = dict.fromkeys(names, 0)
        self.started: dict[str, float] = {}
        self.ended: float | None = None  # when the last step's exchange ended (unmasked), before the update is applied
        self.step = ""
        self.rejected: dict[str, set[int]] = {}  # step -> clients whose message the server refused there

    def run(self, step, name: str, args_for, message_bytes: float = 0.0, carried=None):
        """Inject this step's dropouts, call the workers of the clients still alive, and yield their messages
        in client-id order as they arrive; a client whose message does not come is lost. `carried`: the
        previous round's evaluation, run by the workers after this step."""
        self.started[name] = time.perf_counter()
        self.step = name
        if name != "advertise" and self.dropout > 0:
            gone = {c for c in sorted(self.alive) if self.rng.random() < self.dropout}
            self.drops[name] += len(gone)
            self.alive -= gone
        if name == self.upload and self.late & self.alive:
            self.drops[name] += len(self.late & self.alive)
            self.alive -= self.late
        called = {w: [c for c in cs if c in self.alive] for w, cs in self.by_worker.items()}
        calls = {w: a for w, cs in called.items() if (a := args_for(w, cs)) is not None}
        lost = set()
        for cid, msg in exchange(self.pool, step, calls, called, self.tally, message_bytes, carried):
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
            self.tally.timed("t_aggregate", add, msg, cid)
        except secagg.RoundAborted:
            raise
        except (secagg.ProtocolError, wire.WireError) as err:
            self.reject(cid)
            tqdm.write(f"rejected a message of client {cid}: {err}")

    def take_each(self, adds, cid: int, data: bytes) -> int:
        """A message per exchange (framed by `together`), each to its server; the first one refused rejects the
        client. Returns the bytes of the messages."""
        try:
            msgs = apart(data, len(adds))
        except wire.WireError as err:
            self.reject(cid)
            tqdm.write(f"rejected a message of client {cid}: {err}")
            return len(data)
        for add, msg in zip(adds, msgs):
            self.take(add, cid, msg)
            if cid not in self.alive:
                break
        return sum(map(len, msgs))

    def reject(self, cid: int) -> None:
        self.tally.row["rejected"] += 1
        self.alive.discard(cid)
        self.rejected.setdefault(self.step, set()).add(cid)

    def end(self) -> None:
        """The protocol is over: what the server does next (apply the update, decode a table) is not an exchange's."""
        self.ended = time.perf_counter()

    def finish(self, row: dict, late_ignored: int) -> None:
        names = list(self.started) + ["end"]
        self.started["end"] = self.ended if self.ended is not None else time.perf_counter()
        row.update({f"t_step_{a}": self.started[b] - self.started[a] for a, b in zip(names, names[1:])})
        row.update(dropped=sum(self.drops.values()), **{f"dropped_{s}": self.drops.get(s, 0) for s in FRESH_STEPS},
                   late_ignored=late_ignored)


def run(server, pool, tally: Tally, r: int, chash: str, cohort: list[int], by_worker: dict[int, list[int]],
        delivery, run_id: str, carried=None) -> bool:
    """The server half of one masked round; returns whether it was applied (False: aborted, and the model is
    unchanged: fewer than t survivors, a survivor graph not connected, shares that do not rebuild a secret, a
    summed weight not positive, or under `fresh` a summary whose unit weights do not count its survivors, or a
    second exchange without a client of the first's linear summary). A worker that dies drops its clients.
    Under `fresh` the round has two masked exchanges (sketch, then values), each its own protocol instance;
    their keys travel together. `carried`: the previous round's evaluation, run by the workers after the step
    that trains."""
    plan = server.plan
    fresh = server.policy is not None and server.policy.fresh
    if fresh:
        sketch = server.policy.sketch(r)
        layouts = {"sketch": MaskedLayout(plan, 0, sketch.rows * sketch.cols, plan.sketch_bits),
                   "values": MaskedLayout(plan, plan.k, 0)}
    elif plan.linear is not None:
        layouts = {"": MaskedLayout(plan, 0, server.sketch_cells(r), plan.linear_bits, plan.linear_clip)}
    else:
        layouts = {"": MaskedLayout(plan, plan.k, server.sketch_cells(r))}
    aggs = [_aggregator(plan, chash, r, cohort, run_id, name, layout) for name, layout in layouts.items()]
    sessions = [a.session for a in aggs]
    key_roots = [hashlib.sha256(f"fedsqueeze-keys:{chash}:{r}{':' + n if n else ''}".encode()).digest()
                 for n in layouts]
    steps = _Steps(pool, tally, cohort, by_worker, plan.dropout,
                   np.random.default_rng(np.random.SeedSequence([plan.training.seed, r, 17])),
                   FRESH_STEPS if fresh else STEPS, plan.dropped_stragglers(r))
    try:
        for cid, msgs in steps.run(advertise, "advertise",
                                   lambda w, cs: (r, sessions, cohort, cs, [a.length for a in aggs],
                                                  server.aborted_rounds, server.unsummed, key_roots)):
            tally.up_protocol += steps.take_each([a.add_keys for a in aggs], cid, msgs)
        rosters = tuple(a.roster() for a in aggs)
        tally.down += sum(map(len, rosters)) * len(steps.alive)
        for cid, msgs in steps.run(share_keys, "share_keys", lambda w, cs: (rosters, cs) if cs else None):
            tally.up_protocol += steps.take_each([a.add_shares for a in aggs], cid, msgs)
        bundles = [a.bundles() for a in aggs]
        tally.down += sum(len(b) for each in bundles for b in each.values())
        for each in bundles:
            steps.alive &= set(each)

        def first_args(w, cs):  # (broadcast, round, bundles, clients, catch-up)
            if not cs:
                return None
            ref, catchup = delivery.to(w)
            return ref, r, {c: bundles[0][c] for c in cs}, cs, catchup

        first = aggs[0]
        table_bytes = wire.masked_bytes(first.layout.cells, first.layout.bits) if first.layout.cells else 0
        for cid, msg in steps.run(masked_sketch if fresh else masked_input, "masked_sketch" if fresh else
                                  "masked_input", first_args, wire.masked_bytes(first.length, first.layout.bits) + 256,
                                  carried):
            tally.up_payload += len(msg)
            # the summary (fresh: the whole message) or the table's share of it, as it arrives: an aborted round's too
            tally.up_sketch += len(msg) if fresh else table_bytes
            steps.take(first.add, cid, msg)
        survivors = _unmask(steps, tally, first, 0, "unmask_sketch" if fresh else "unmask")
        values, weight, cells = tally.timed("t_unmask", first.result)
        if fresh:
            if not first.layout.counts(weight, len(survivors)):
                raise secagg.RoundAborted(f"the summary's sum counts {weight:.3f} clients, not its "
                                          f"{len(survivors)} survivors")
            # choosing the index set is the server's decoding, as the `sketch` policy's choice is (apply_masked)
            server.positions = tally.timed("t_decode", server.policy.choose, r, cells)
            second = aggs[1]
            index_set = wire.encode_round_index(second.session, server.positions, plan.length)
            tally.down += len(index_set) * len(steps.alive)
            for cid, msg in steps.run(masked_values, "masked_input",
                                      lambda w, cs: (index_set, r, {c: bundles[1][c] for c in cs}, cs) if cs else None,
                                      wire.masked_bytes(second.length, second.layout.bits) + 256):
                tally.up_payload += len(msg)
                steps.take(second.add, cid, msg)
            _unmask(steps, tally, second, 1, "unmask", same_as=survivors if sketch.linear else None)
            values, weight, cells = tally.timed("t_unmask", second.result)
    except secagg.RoundAborted as err:  # nothing applied (and below t nothing unmasked); the run goes on
        tally.row["aborted"], tally.aborted_why = True, str(err)
        tqdm.write(f"round {r}: aborted: {err}")
        applied = False
    else:
        steps.end()
        t0 = time.perf_counter()
        server.apply_masked(r, values, weight, cells)
        if steps.rejected.get("masked_input"):  # they staged residuals for values the sum does not hold
            server.unsummed[r] = sorted(steps.rejected["masked_input"])
        tally.stats["t_decode"] += time.perf_counter() - t0
        applied = True
    steps.finish(tally.row, sum(a.state.late_ignored for a in aggs))
    return applied


def _aggregator(plan, chash: str, r: int, cohort: list[int], run_id: str, name: str,
                layout: MaskedLayout) -> MaskedAggregator:
    """One masked exchange's server. Its session binds the experiment (config hash), round, cohort, exchange,
    protocol settings, field width and a nonce of this run: a message replayed from another run, round,
    exchange or configuration is refused."""
    nonce = hashlib.sha256(f"{run_id}:{r}{':' + name if name else ''}".encode()).digest()[:16]
    session = secagg.session_id(chash, r, cohort, protocol=plan.secagg, length=layout.length,
                                threshold=plan.threshold, degree=plan.neighbours, nonce=nonce, bits=layout.bits)
    return MaskedAggregator(plan, session, cohort, layout, sums=plan.memory and name != "sketch")


def _unmask(steps, tally: Tally, agg: MaskedAggregator, exchange: int, name: str,
            same_as: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """An exchange's unmask step: the request to its survivors, their shares back; returns the survivors.
    `same_as`: the first exchange's survivors under `fresh` with a summary linear in the update (`exact`,
    `sketch`). A client summed there but missing here aborts the round before anything is unmasked: the
    difference of the two sums would be that client's values at the index set. Energies are not linear, and
    the first exchange's weight slot holds a unit weight, never a client's own, so under them the round goes on
    with the second's survivors."""
    request, survivors = agg.unmask_request()
    if same_as is not None and set(survivors) != set(same_as):
        missing = sorted(set(same_as) - set(survivors))
        raise secagg.RoundAborted(f"clients {missing} of the first exchange's sum are missing from the second: "
                                  "unmasking it would reveal their share of the difference")
    tally.down += len(request) * len(survivors)
    steps.alive &= set(survivors)
    for cid, msg in steps.run(unmask, name, lambda w, cs: (request, cs, exchange) if cs else None):
        tally.up_protocol += len(msg)
        steps.take(agg.add_unmask, cid, msg)
    return survivors
