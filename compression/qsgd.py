"""QSGD (Alistarh et al. 2017): stochastic quantization to s levels of each tensor's norm, bit-packed."""

from __future__ import annotations

import struct

import numpy as np

from .base import (
    Codec,
    DecodeError,
    check_length,
    check_payload_length,
    check_seed,
    check_vector,
    input_seed,
    read_header,
)
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
from .registry import register

__all__ = ["QSGDCompression"]

VERSION = 1
_HEADER = struct.Struct("<BIH")  # version, n, levels
MAX_LEVELS = 2**15 - 1  # codes stay within 16 bits
_FLOAT32_MAX = np.finfo(np.float32).max


def code_width(levels: int) -> int:
    """Bits per entry: a sign bit and enough bits for a level in [0, levels]."""
    return 1 + int(levels).bit_length()


class QSGDCompression(Codec):
    """Each entry v_i of a tensor with scale r becomes sign(v_i) * r * l_i / s, l_i in {0..s} drawn
    as floor(s |v_i| / r + u), u ~ U[0, 1): unbiased (E[decoded] = v), |decoded - v| < r / s.

    r is the tensor's L2 norm rounded up to float32 (capped at float32's largest value, which is
    still >= every |v_i|, so the bounds hold); one r for the whole vector, or one per layer when
    `layout` is given. `ratio` is accepted and ignored: the size is set by `levels`.

    Options:
      levels: s, 1..32767 (default 16: 6 bits per entry)
      layout: None or layer sizes summing to n (one norm per layer)
      seed:   0 (default): the rounding noise is drawn from (seed, the input's CRC-32), which is
              reproducible and independent of the worker; None: OS entropy.

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        uint16  s, the number of levels
        uint32  L, then L uint32 layer sizes (L = 0: one tensor, no sizes)
        max(L, 1) float32 scales r (finite, >= 0, not -0.0)
        n codes of w = 1 + bit_length(s) bits, bit-packed in little bit order (`compression.packing`):
        code = level | sign << (w - 1), level <= s, sign 1 iff the entry is negative (never on level 0)
        (all levels 0 in a tensor whose scale is 0)

    Size: 11 + 4L + 4 * max(L, 1) + ceil(n * w / 8) bytes; without a layout 15 + ceil(n * w / 8)
    (levels=16: w = 6, so 15 + ceil(3n/4)).
    """

    name = "qsgd"
    biased = False
    uses_ratio = False

    def __init__(self, ratio: float = 0.5, levels: int = 16, layout=None, seed: int | None = 0):
        super().__init__(ratio)
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not 1 <= levels <= MAX_LEVELS:
            raise ValueError(f"levels must be an integer in [1, {MAX_LEVELS}], got {levels!r}")
        self.levels, self.layout, self.seed = int(levels), check_layout(layout), check_seed(seed)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        n = vector.size
        check_encodable_length(n, "qsgd")
        sizes = layer_sizes(self.layout, n)
        s, width = self.levels, code_width(self.levels)
        scales = _scales(vector, sizes)
        magnitude = np.abs(vector)
        if n:
            per_entry = scales[0] if sizes.size == 1 else np.repeat(scales, sizes)
            with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 in an all-zero tensor: level 0 below
                unit = magnitude / per_entry  # <= 1: the scale is at least the tensor's largest |v|
            noise = np.random.default_rng(input_seed(self.seed, vector)).random(n, dtype=np.float32)
            level = np.floor(np.nan_to_num(unit, nan=0.0) * np.float32(s) + noise)
            codes = np.minimum(level, s).astype(np.uint16)
            codes |= ((vector < 0) & (codes > 0)).astype(np.uint16) << (width - 1)
        else:
            codes = np.zeros(0, dtype=np.uint16)
        return b"".join((_HEADER.pack(VERSION, n, s), pack_layout(self.layout), scales.astype("<f4").tobytes(),
                         pack_codes(codes, width)))

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        _, n, s = read_header("qsgd", payload, _HEADER, VERSION)
        check_payload_length("qsgd", n, length)
        if not 1 <= s <= MAX_LEVELS:
            raise DecodeError(f"qsgd levels {s} out of range [1, {MAX_LEVELS}]")
        sizes, _, offset = read_layout(payload, _HEADER.size, n, "qsgd")
        width = code_width(s)
        check_total("qsgd", len(payload), offset + 4 * sizes.size + packed_size(n, width))
        scales = np.frombuffer(payload, dtype="<f4", count=sizes.size, offset=offset).astype(np.float32)
        if not np.isfinite(scales).all() or np.signbit(scales).any():
            raise DecodeError("qsgd scales must be finite and >= 0 (not -0.0)")
        offset += 4 * sizes.size
        codes = unpack_codes(np.frombuffer(payload, dtype=np.uint8, offset=offset), n, width, "qsgd codes")
        level = codes & ((1 << (width - 1)) - 1)
        negative = (codes >> (width - 1)).astype(bool)
        if (level > s).any():
            raise DecodeError(f"qsgd level {int(level.max())} above the {s} levels")
        if (negative & (level == 0)).any():
            raise DecodeError("qsgd sign bit set on a zero level")
        zero = scales == 0
        if zero.any() and ((np.repeat(zero, sizes) if sizes.size > 1 else zero[0]) & (level != 0)).any():
            raise DecodeError("qsgd nonzero level in a tensor whose scale is 0")
        unit = scales.astype(np.float64) / s
        values = (level * (unit[0] if sizes.size == 1 else np.repeat(unit, sizes))).astype(np.float32)
        np.negative(values, out=values, where=negative)
        return values

    def size(self, n: int, k: int | None = None) -> int:
        layers = 1 if self.layout is None else len(self.layout)
        return _HEADER.size + layout_size(self.layout) + 4 * layers + packed_size(n, code_width(self.levels))

    def __repr__(self) -> str:
        layout = None if self.layout is None else f"<{len(self.layout)} layers>"
        return f"QSGDCompression(levels={self.levels}, layout={layout}, seed={self.seed!r})"


def _scales(vector: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """float32 L2 norm of each layer, rounded up (never below the true norm), capped at float32's max."""
    if sizes.size == 1:
        squares = np.array([np.dot(vector, vector.astype(np.float64))]) if vector.size else np.zeros(1)
    else:
        wide = vector.astype(np.float64)
        squares = np.add.reduceat(wide * wide, np.concatenate(([0], np.cumsum(sizes)[:-1])))
    norms = np.sqrt(squares)
    with np.errstate(over="ignore"):  # a norm beyond float32 becomes Inf, capped just below
        scales = norms.astype(np.float32)
    low = scales.astype(np.float64) < norms
    scales[low] = np.nextafter(scales[low], np.float32(np.inf))
    return np.minimum(scales, _FLOAT32_MAX)


register("qsgd", QSGDCompression)
