"""The identity codec: the dense baseline every other codec is measured against."""

from __future__ import annotations

import numpy as np

from .base import Codec, DecodeError, check_length, check_vector
from .registry import register

__all__ = ["NoCompression"]


class NoCompression(Codec):
    """Raw little-endian float32 values; `ratio` is accepted and ignored.

    Size: 4 * n bytes.
    """

    name = "none"
    biased = False
    uses_ratio = False

    def encode(self, vector: np.ndarray) -> bytes:
        return check_vector(vector).astype("<f4", copy=False).tobytes()

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        expected = 4 * length
        if len(payload) < expected:
            raise DecodeError(f"none payload truncated: expected {expected} bytes, got {len(payload)}")
        if len(payload) > expected:
            raise DecodeError(f"none payload has trailing bytes: expected {expected} bytes, got {len(payload)}")
        values = np.frombuffer(payload, dtype="<f4").astype(np.float32)  # astype copies: writable, native
        if not np.isfinite(values).all():
            raise DecodeError("none payload contains NaN or Inf values")
        return values

    def size(self, n: int, k: int | None = None) -> int:
        return 4 * n


register("none", NoCompression)
