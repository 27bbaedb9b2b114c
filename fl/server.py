"""The server: global weights, the broadcast, and streaming aggregation (never all updates at once)."""
from __future__ import annotations

import numpy as np

import compression
import secagg
from fl import wire
from fl.policy import broadcast_codec


class Broadcaster:
    """Encodes what clients receive. Round 0 (and every round without server compression) sends the
    dense model; with server compression, the codec of (global - what clients hold): the part not
    sent stays in that difference, which is server-side error feedback."""

    def __init__(self, cfg, length: int, layer_sizes: list[int] | None = None):
        self.codec = broadcast_codec(cfg, layer_sizes)
        self.dense = compression.get("none")()
        self.length = length
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


class PlainAggregator:
    """Weighted FedAvg of decoded client updates, summed one message at a time."""

    def __init__(self, round: int, length: int):
        self.round, self.length = round, length
        self.total = np.zeros(length, np.float64)
        self.scratch = np.empty(length, np.float64)  # reused: no 8n-byte allocation per message
        self.weight = 0.0
        self.rejected = 0

    def add(self, message: bytes) -> None:
        msg = wire.decode_update(message, self.round, self.length)
        try:
            update = compression.get(msg.codec)().decode(msg.payload, self.length)
        except ValueError:  # includes compression.DecodeError: a non-finite or malformed payload is never summed
            self.rejected += 1
            raise
        np.multiply(update, np.float64(msg.weight), out=self.scratch)  # in float64: weight * float64(update)
        self.total += self.scratch
        self.weight += msg.weight

    def result(self) -> np.ndarray | None:
        return None if self.weight == 0 else (self.total / self.weight).astype(np.float32)


class MaskedAggregator:
    """Server side of a masked round: the mask protocol's state machine (bytes in, bytes out) plus
    dequantization. The masked vector is [k weighted values at the shared index set | weight |
    residual sketch]; the server only ever sees the sum over the surviving clients."""

    def __init__(self, cfg, session: bytes, cohort: list[int], k: int, sketch_cells: int):
        self.k, self.sketch_cells = k, sketch_cells
        self.length = k + 1 + sketch_cells
        protocol = secagg.get(cfg.secagg.name)
        self.config = secagg.make_round(protocol, session, cohort, self.length, cfg.secagg.threshold,
                                        cfg.secagg.neighbours)
        self.state = protocol.Server(self.config)
        n_max = cfg.fl.clients_per_round
        self.q_values = secagg.FixedPointQuantizer(cfg.secagg.clip, n_max)
        self.q_weight = secagg.FixedPointQuantizer(cfg.secagg.max_weight, n_max)
        self.q_sketch = secagg.FixedPointQuantizer(cfg.secagg.sketch_clip, n_max)

    def add_keys(self, message: bytes) -> None:
        self.state.receive_keys(wire.decode_advertise(message))

    def roster(self) -> bytes:
        return wire.encode_roster(self.state.roster())

    def add_shares(self, message: bytes) -> None:
        self.state.receive_shares(wire.decode_share_keys(message))

    def bundles(self) -> dict[int, bytes]:
        """The encrypted shares addressed to each client that sent shares, as one message per client."""
        return {cid: wire.encode_share_bundle(b) for cid, b in self.state.bundles().items()}

    def add(self, message: bytes) -> None:
        self.state.add(wire.decode_masked(message, self.length))

    def unmask_request(self) -> tuple[bytes, tuple[int, ...]]:
        request = self.state.unmask_request()
        return wire.encode_unmask_request(request), request.survivors

    def add_unmask(self, message: bytes) -> None:
        self.state.receive_unmask(wire.decode_unmask_response(message))

    def result(self) -> tuple[np.ndarray, float, np.ndarray | None]:
        """(mean update at the index set, summed weight, summed sketch or None); raises RoundAborted."""
        total = self.total = self.state.result()  # the field sum: all the server ever sees
        weight = float(self.q_weight.dequantize(total[self.k:self.k + 1])[0])
        if not weight > 0:
            raise secagg.RoundAborted(f"summed FedAvg weight {weight} is not positive")
        values = (self.q_values.dequantize(total[:self.k]) / weight).astype(np.float32)
        sketch = None
        if self.sketch_cells:
            sketch = self.q_sketch.dequantize(total[self.k + 1:]).astype(np.float32)
        return values, weight, sketch
