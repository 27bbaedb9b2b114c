"""The server role: the global weights, what clients hold (the broadcast and its error feedback), the
shared index policy and the sketch accumulator, the sum of clients' memories (fl.aggregation=memory), and which
broadcast each client and worker last saw."""
from __future__ import annotations

import numpy as np

import compression
from compression.countsketch import SketchAccumulator
from fl import wire
from fl.errors import Diverged


class Broadcaster:
    """Encodes what clients receive. Round 0 (and every round without server compression) sends the
    dense model; with server compression, the codec of (global - what clients hold): the part not
    sent stays in that difference, which is server-side error feedback."""

    def __init__(self, plan):
        self.codec = plan.broadcast_codec
        self.dense = compression.get("none")()
        self.length = plan.length
        self.view: np.ndarray | None = None  # the weights every client holds after the last broadcast

    def sends_delta(self) -> bool:
        """Whether the next broadcast is a delta (a client that missed one then needs a catch-up)."""
        return self.view is not None and self.codec.name != "none"

    def catchup(self, round: int) -> bytes:
        """The dense model clients hold before `round`'s broadcast: what a client (or worker) that missed
        broadcasts applies first, so its model never depends on which rounds it saw."""
        return wire.encode_broadcast(round - 1, "none", self.length, False, self.dense.encode(self.view))

    def encode(self, round: int, global_weights: np.ndarray, positions: np.ndarray | None = None,
               index_seed: int = 0) -> bytes:
        if not self.sends_delta():
            codec, is_delta, payload = self.dense, False, self.dense.encode(global_weights)
            self.view = global_weights.copy()
        else:
            codec, is_delta = self.codec, True
            payload = codec.encode(global_weights - self.view)
            self.view += codec.decode(payload, self.length)
        return wire.encode_broadcast(round, codec.name, self.length, is_delta, payload,
                                     **wire.index_set_fields(positions, index_seed, self.length))


class ServerStep:
    """How a round's mean update moves the global model: added as is (FedAvg), scaled by server_lr, or (with
    server_momentum) scaled by server_lr through a momentum buffer over rounds (FedAvgM, Hsu et al. 2019), which
    keeps moving the positions of earlier rounds' sparse updates after the cohort that sent them has left."""

    def __init__(self, lr: float, momentum: float, length: int):
        self.lr, self.momentum = lr, momentum
        self.buffer = np.zeros(length, np.float32) if momentum else None

    def __call__(self, weights: np.ndarray, update: np.ndarray, positions: np.ndarray | None = None) -> None:
        """Apply `update` (at `positions`; None: the whole vector) to `weights` in place. An overflow is left to
        the server's check that the model stayed finite (Server._check_finite)."""
        at = slice(None) if positions is None else positions
        with np.errstate(over="ignore"):
            if self.buffer is None:
                weights[at] += update if self.lr == 1.0 else np.float32(self.lr) * update
                return
            self.buffer *= np.float32(self.momentum)
            self.buffer[at] += update
            weights += np.float32(self.lr) * self.buffer


class Memory:
    """fl.aggregation=memory: the weighted sum of every client's memory (what the server holds of its latest
    update), built from the differences clients send, and the sum of their weights. Each round that sums an update
    the server steps by the mean over every client it has heard from, not only this round's cohort (MIFA, Gu et al.
    2021, which steps in empty rounds too): with 10 of 100 clients a round, an absent client's update keeps counting
    until it sends a newer one."""

    def __init__(self, length: int):
        self.total = np.zeros(length, np.float64)
        self.weight = 0.0
        self.members: set[int] = set()  # plain rounds: the clients the sum holds (masked ones send their weight once)

    def add(self, sums: np.ndarray, weight: float, positions: np.ndarray | None = None) -> None:
        self.total[slice(None) if positions is None else positions] += sums
        self.weight += weight

    def mean(self) -> np.ndarray | None:
        return (self.total / self.weight).astype(np.float32) if self.weight > 0 else None

    def reset(self) -> None:
        """After clients lost their memories (a worker died): the sum no longer equals theirs, so both restart."""
        self.total[:] = 0.0
        self.weight = 0.0
        self.members.clear()


class Delivery:
    """A round's broadcast as each worker needs it: with a catch-up first for a worker that missed one."""

    def __init__(self, server: Server, round: int, ref, catchup, stale: set[int]):
        self.server, self.round, self.ref, self.catchup, self.stale = server, round, ref, catchup, stale

    def to(self, w: int) -> tuple:
        """(broadcast, catch-up or None) for worker `w`, which is called now and so applies this round's."""
        self.server.worker_round[w] = self.round
        return self.ref, self.catchup if w in self.stale else None


class Server:
    def __init__(self, plan, weights: np.ndarray):
        self.plan = plan
        self.weights = weights  # the global model, one flat float32 vector
        self.step = ServerStep(plan.server_lr, plan.server_momentum, plan.length)
        self.memory = Memory(plan.length) if plan.memory else None
        self.broadcaster = Broadcaster(plan)
        self.policy = plan.index_policy()  # the shared index set under masking; None otherwise
        # a count sketch's table needs the server's error feedback (heavy hitters out, the rest kept); a rotation
        # is inverted whole
        sketching = plan.linear is not None and hasattr(plan.linear, "hashes")
        self.accumulator = SketchAccumulator(plan.linear, plan.length) if sketching else None
        self.positions: np.ndarray | None = None  # this round's shared index set
        self.last_sync: dict[int, int] = {}  # client -> last round it received a broadcast
        self.worker_round: dict[int, int] = {}  # worker -> last round whose broadcast it applied
        self.sizes: list[int] = []  # broadcast bytes per round
        self.aborted_rounds: list[int] = []  # masked rounds not applied: residuals staged in them are dropped
        self.unsummed: dict[int, list[int]] = {}  # applied round -> clients whose values it refused

    def forget(self, workers) -> None:
        """Revived workers hold no model: they get a catch-up with their next broadcast."""
        for w in workers:
            self.worker_round.pop(w, None)

    def broadcast(self, r: int, cohort: list[int], workers, put) -> tuple[Delivery, int, int]:
        """Encode round r's broadcast (with the index set under masking) and put it (and a catch-up for
        workers that missed one) where workers read it; returns the delivery, the downlink bytes of the
        cohort and how many clients needed a catch-up."""
        self.positions, index_seed = self.policy.positions(r) if self.policy is not None else (None, 0)
        delta = self.broadcaster.sends_delta()
        stale = {w for w in workers if self.worker_round.get(w, -1) != r - 1}
        behind = delta and any(self.last_sync.get(cid, -1) != r - 1 for cid in cohort)
        dense = self.broadcaster.catchup(r) if delta and (stale or behind) else None
        catchup = put(dense) if stale and dense is not None else None
        message = self.broadcaster.encode(r, self.weights, self.positions, index_seed)
        down, catchups = self._downlink(cohort, r, len(message), len(dense) if dense is not None else 0)
        return Delivery(self, r, put(message), catchup, stale), down, catchups

    def _downlink(self, cohort, r: int, size: int, dense: int) -> tuple[int, int]:
        """This broadcast per client plus, when it is a delta, what a client that missed rounds fetches first:
        the broadcasts it missed, or the catch-up (the dense model before this round, `dense` bytes) where that
        is shorter. A dense broadcast (dense = 0) needs no catch-up."""
        total = catchups = 0
        for cid in cohort:
            missed = self.sizes[self.last_sync.get(cid, -1) + 1:r] if dense else []
            total += size + (min(sum(missed), dense) if missed else 0)
            catchups += bool(missed)
            self.last_sync[cid] = r
        self.sizes.append(size)
        return total, catchups

    def sketch_cells(self, r: int) -> int:
        """Cells of the masked vector after the values and weight: a linear codec's table or the residual sketch."""
        if self.accumulator is not None:
            return self.accumulator.table.size
        if self.plan.linear is not None:
            return self.plan.linear.table_size(self.plan.length)
        sketch = self.policy.sketch(r)
        return sketch.rows * sketch.cols if sketch is not None else 0

    def apply(self, update: np.ndarray | None) -> None:
        """A plain round's mean update (None: nothing arrived)."""
        if update is not None:
            self.step(self.weights, update)
            self._check_finite()

    def apply_plain(self, agg) -> None:
        """A plain round's summed updates (fl.rounds.plain.PlainAggregator): their mean, or under memory their
        sum added to the memories' and the memories' mean."""
        if self.memory is None:
            return self.apply(agg.result())
        if not agg.senders:
            return
        joined = set(agg.senders) - self.memory.members
        self.memory.add(agg.total, sum(agg.senders[c] for c in joined))
        self.memory.members |= joined
        self.apply(self.memory.mean())

    def _check_finite(self) -> None:
        if not np.isfinite(self.weights).all():
            raise Diverged(f"the global model has {int(np.count_nonzero(~np.isfinite(self.weights)))} entries beyond "
                           f"float32's range after this round's update: the run diverged")

    def apply_masked(self, r: int, values: np.ndarray, weight: float, cells: np.ndarray | None) -> None:
        """A masked round's result (fl.rounds.masked.MaskedAggregator.result): the mean values at the index set
        (under fl.aggregation=memory their sum, added to the memories'), the summed weight and the summed table
        cells. A linear codec's table is divided by the weight: a count sketch's goes through the server's sketch
        error feedback (the heavy hitters extracted, the rest kept for later), any other is decoded whole. Without
        a linear codec the index policy then observes the round."""
        if self.accumulator is not None:
            self.accumulator.add(cells.reshape(self.accumulator.table.shape) / weight)
            positions, values = self.accumulator.extract()
            self.step(self.weights, values, positions)
            return self._check_finite()
        if self.plan.linear is not None:
            self.step(self.weights, self.plan.linear.from_table(cells / weight, self.plan.length))
            return self._check_finite()
        if self.memory is not None:  # the summed differences at the index set, and the weight of clients new to it
            self.memory.add(values, weight, self.positions)
            update = self.memory.mean()
            if update is not None:
                self.step(self.weights, update)
        else:
            self.step(self.weights, values, self.positions)
        self._check_finite()
        sketch = self.policy.sketch(r)
        table = None if cells is None else cells.reshape(sketch.rows, sketch.cols)
        self.policy.observe(r, self.positions, values, table)

    def aborted(self, r: int) -> None:
        self.aborted_rounds.append(r)
