"""Half precision: every entry rounded to float16, a dense baseline at 2 bytes per entry."""

from __future__ import annotations

import struct

import numpy as np

from .base import Codec, DecodeError, check_length, check_payload_length, check_vector, read_header
from .packing import check_encodable_length, check_total
from .registry import register

__all__ = ["Float16Compression"]

VERSION = 1
_HEADER = struct.Struct("<BI")  # version, n
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504


class Float16Compression(Codec):
    """Each entry rounded to the nearest IEEE float16; entries beyond +-65504 saturate to +-65504.

    Relative error at most 2^-11 for |v| in float16's normal range [2^-14, 65504]; absolute error at
    most 2^-25 below it (subnormals). Rounding is deterministic, so E[decoded] != v: `biased` is True
    and error feedback, if on, carries the rounding (and any saturation) to the next round.
    `ratio` is accepted and ignored.

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        n float16 values (finite)

    Size: 5 + 2n bytes.
    """

    name = "fp16"
    biased = True
    uses_ratio = False

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        check_encodable_length(vector.size, "fp16")
        halves = np.clip(vector, -FLOAT16_MAX, FLOAT16_MAX).astype("<f2")
        return _HEADER.pack(VERSION, vector.size) + halves.tobytes()

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        _, n = read_header("fp16", payload, _HEADER, VERSION)
        check_payload_length("fp16", n, length)
        check_total("fp16", len(payload), self.size(n))
        values = np.frombuffer(payload, dtype="<f2", count=n, offset=_HEADER.size).astype(np.float32)
        if not np.isfinite(values).all():
            raise DecodeError("fp16 payload contains NaN or Inf values")
        return values

    def size(self, n: int, k: int | None = None) -> int:
        return _HEADER.size + 2 * n


register("fp16", Float16Compression)
