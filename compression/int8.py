"""8-bit linear quantization: one float32 scale per tensor, every entry rounded to an int8 multiple of it."""

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
    pack_layout,
    read_layout,
)
from .registry import register

__all__ = ["Int8Compression"]

VERSION = 1
_HEADER = struct.Struct("<BI")  # version, n
_FLOAT32_MAX = np.float32(np.finfo(np.float32).max)


class Int8Compression(Codec):
    """Each entry becomes q * scale, q = round(v / scale) in [-127, 127], scale = max|v| / 127 of its
    tensor (as float32, rounded up so that 127 * scale >= max|v|, or down by one step where
    127 * scale would overflow float32, for max|v| within 2^-24 of float32's largest value).

    |decoded - v| <= scale / 2 (plus float32 rounding of the product). Deterministic rounding:
    `biased` is True. One scale for the whole vector, or one per layer when `layout` is given.
    `ratio` is accepted and ignored.

    Options: layout (None or layer sizes summing to n).

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        uint32  L, then L uint32 layer sizes (L = 0: one tensor, no sizes)
        max(L, 1) float32 scales (finite, >= 0, not -0.0)
        n int8 values q in [-127, 127] (all 0 in a tensor whose scale is 0)

    Size: 9 + 4L + 4 * max(L, 1) + n bytes; without a layout 13 + n.
    """

    name = "int8"
    biased = True
    uses_ratio = False

    def __init__(self, ratio: float = 0.5, layout=None):
        super().__init__(ratio)
        self.layout = check_layout(layout)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        n = vector.size
        check_encodable_length(n, "int8")
        sizes = layer_sizes(self.layout, n)
        scales = _scales(vector, sizes)
        if n:
            per_entry = scales[0] if sizes.size == 1 else np.repeat(scales, sizes)
            with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 in an all-zero tensor
                q = np.rint(vector / per_entry)
            q = np.clip(np.nan_to_num(q, nan=0.0), -127, 127).astype(np.int8)
        else:
            q = np.zeros(0, dtype=np.int8)
        return b"".join((_HEADER.pack(VERSION, n), pack_layout(self.layout), scales.astype("<f4").tobytes(),
                         q.tobytes()))

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        _, n = read_header("int8", payload, _HEADER, VERSION)
        check_payload_length("int8", n, length)
        sizes, _, offset = read_layout(payload, _HEADER.size, n, "int8")
        check_total("int8", len(payload), offset + 4 * sizes.size + n)
        scales = np.frombuffer(payload, dtype="<f4", count=sizes.size, offset=offset).astype(np.float32)
        if not np.isfinite(scales).all() or np.signbit(scales).any():
            raise DecodeError("int8 scales must be finite and >= 0 (not -0.0)")
        q = np.frombuffer(payload, dtype=np.int8, count=n, offset=offset + 4 * sizes.size)
        if (q == -128).any():
            raise DecodeError("int8 value -128 is outside [-127, 127]")
        per_entry = scales.astype(np.float64) if sizes.size > 1 else scales[0].astype(np.float64)
        if sizes.size > 1:
            per_entry = np.repeat(per_entry, sizes)
            if ((per_entry == 0) & (q != 0)).any():
                raise DecodeError("int8 nonzero value in a tensor whose scale is 0")
        elif per_entry == 0 and q.any():
            raise DecodeError("int8 nonzero value in a tensor whose scale is 0")
        with np.errstate(over="ignore"):
            values = (q * per_entry).astype(np.float32)
        if not np.isfinite(values).all():
            raise DecodeError("int8 payload decodes to values beyond float32")
        return values

    def size(self, n: int, k: int | None = None) -> int:
        layers = 1 if self.layout is None else len(self.layout)
        return _HEADER.size + layout_size(self.layout) + 4 * layers + n


def _scales(vector: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """float32 max|v| / 127 per layer, with 127 * scale >= max|v| and float32(127 * scale) finite."""
    if vector.size == 0:
        return np.zeros(1, dtype=np.float32)
    magnitude = np.abs(vector)
    if sizes.size == 1:
        peaks = np.array([magnitude.max()], dtype=np.float64)
    else:
        peaks = np.maximum.reduceat(magnitude, np.concatenate(([0], np.cumsum(sizes)[:-1]))).astype(np.float64)
    scales = (peaks / 127).astype(np.float32)
    short = scales.astype(np.float64) * 127 < peaks
    scales[short] = np.nextafter(scales[short], np.float32(np.inf))
    with np.errstate(over="ignore"):
        over = ~np.isfinite((scales.astype(np.float64) * 127).astype(np.float32))
    scales[over] = np.nextafter(scales[over], np.float32(0))
    return scales


register("int8", Int8Compression)
