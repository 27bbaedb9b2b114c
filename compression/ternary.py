"""Ternary sparsification (STC, Sattler et al. 2019): top-k positions, one magnitude, one sign bit each."""

from __future__ import annotations

import struct

import numpy as np

from .base import Codec, DecodeError, check_length, check_payload_length, check_vector, read_header
from .packing import (
    check_encodable_length,
    check_layout,
    check_total,
    layer_sizes,
    layout_size,
    pack_codes,
    pack_layout,
    packed_size,
    read_layout,
    unpack_codes,
)
from .positions import ENCODING_NAMES, pack_positions, position_sizes, unpack_positions
from .registry import register
from .selection import layered_count, select_topk

__all__ = ["TernaryCompression"]

VERSION = 1
_HEADER = struct.Struct("<BII")  # version, n, k


class TernaryCompression(Codec):
    """Keep the top-k positions (k = ceil(ratio * n), as top-k); send each as +mu or -mu.

    mu is the mean magnitude of the kept entries of its tensor: one float32 for the whole vector,
    or one per layer when `layout` is given (then, as in top-k, each layer keeps ceil(ratio * size)
    of its own entries). Zeros among the top k (k above a tensor's nonzeros) are not sent, as sign(0) = 0
    in STC: the payload's k is then the count sent. Biased: use it with error feedback (STC does).

    Options: layout (None or layer sizes summing to n). Positions are chosen as top-k's default
    does (sampled bracket, exact threshold: the same k entries as a full partition).

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        uint32  k (1 <= k <= n)
        uint32  L, then L uint32 layer sizes (L = 0: one tensor, no sizes)
        max(L, 1) float32 magnitudes mu (finite, >= 0, not -0.0)
        uint8   position encoding, then the positions (as top-k: `compression.positions`)
        ceil(k/8) bytes of sign bits (little bit order): bit i set iff the i-th kept entry, in
        position order, is negative (never set where mu is 0)

    Size: 9 + (4 + 4L) + 4 * max(L, 1) + 1 + P + ceil(k/8) bytes, P = the smallest position
    encoding (as top-k). Without a layout: 18 + P + ceil(k/8).
    """

    name = "ternary"
    biased = True

    def __init__(self, ratio: float = 0.5, layout=None):
        super().__init__(ratio)
        self.layout = check_layout(layout)

    def k_for(self, n: int) -> int:
        """How many entries a vector of length `n` keeps at this ratio (and layout)."""
        return layered_count(n, self.ratio, self.layout)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector, finite=False)  # select_topk checks the magnitudes
        n = vector.size
        check_encodable_length(n, "ternary", allow_empty=False)
        sizes = layer_sizes(self.layout, n)
        positions, mask = select_topk(vector, self.ratio, sizes if self.layout is not None else None, sampled_seed=0)
        kept = vector.take(positions)
        layer = _layer_of(positions, sizes)
        zero = kept == 0  # kept only where k exceeds a tensor's nonzeros: sent, they would decode to +mu
        if zero.any() and not zero.all():
            # a tensor of zeros: mu 0
            live = ~zero | (np.bincount(layer, weights=~zero, minlength=sizes.size) == 0)[layer]
            mask[positions[~live]] = False
            positions, kept, layer = positions[live], kept[live], layer[live]
        counts = np.bincount(layer, minlength=sizes.size)
        sums = np.bincount(layer, weights=np.abs(kept), minlength=sizes.size)  # float64: no overflow
        magnitudes = (sums / np.maximum(counts, 1)).astype("<f4")
        negative = (kept < 0) & (magnitudes[layer] > 0)
        encoding, position_bytes = pack_positions(positions, n, mask)
        return b"".join((_HEADER.pack(VERSION, n, positions.size), pack_layout(self.layout), magnitudes.tobytes(),
                         bytes([encoding]), position_bytes, pack_codes(negative, 1)))

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        _, n, k = read_header("ternary", payload, _HEADER, VERSION)
        check_payload_length("ternary", n, length)
        if not 1 <= k <= n:
            raise DecodeError(f"ternary k={k} out of range [1, {n}]")
        sizes, _, offset = read_layout(payload, _HEADER.size, n, "ternary")
        if len(payload) < offset + 4 * sizes.size + 1:
            raise DecodeError(f"ternary payload truncated: expected {sizes.size} magnitudes and a position encoding")
        magnitudes = np.frombuffer(payload, dtype="<f4", count=sizes.size, offset=offset).astype(np.float32)
        if not np.isfinite(magnitudes).all() or np.signbit(magnitudes).any():
            raise DecodeError("ternary magnitudes must be finite and >= 0 (not -0.0)")
        offset += 4 * sizes.size
        encoding = payload[offset]
        if encoding >= len(ENCODING_NAMES):
            raise DecodeError(f"unknown ternary position encoding {encoding}")
        data = np.frombuffer(payload, dtype=np.uint8, offset=offset + 1)
        positions, position_size = unpack_positions(encoding, data, n, k, "ternary")
        offset += 1 + position_size
        check_total("ternary", len(payload), offset + packed_size(k, 1))
        negative = unpack_codes(np.frombuffer(payload, dtype=np.uint8, offset=offset), k, 1, "ternary signs")
        kept = magnitudes[_layer_of(positions, sizes)]
        if (negative.astype(bool) & (kept == 0)).any():
            raise DecodeError("ternary sign bit set on an entry whose magnitude is 0")
        dense = np.zeros(n, dtype=np.float32)
        dense[positions] = np.where(negative.astype(bool), -kept, kept)
        return dense

    def size(self, n: int, k: int | None = None) -> int:
        """An upper bound (positions at most min(ceil(n/8), 5k) bytes, as top-k); see `encoded_size`."""
        k = self.k_for(n) if k is None else k
        layers = 1 if self.layout is None else len(self.layout)
        return _HEADER.size + layout_size(self.layout) + 4 * layers + 1 + min((n + 7) // 8, 5 * k) + packed_size(k, 1)

    def encoded_size(self, positions: np.ndarray, n: int) -> int:
        """The exact payload size when these positions are kept."""
        positions = np.asarray(positions, dtype=np.int64)
        layers = 1 if self.layout is None else len(self.layout)
        return (_HEADER.size + layout_size(self.layout) + 4 * layers + 1 + min(position_sizes(positions, n).values())
                + packed_size(positions.size, 1))


def _layer_of(positions: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Index of the layer each position falls in."""
    if sizes.size == 1:
        return np.zeros(positions.size, dtype=np.intp)
    return np.searchsorted(np.cumsum(sizes), positions, side="right")


register("ternary", TernaryCompression)
