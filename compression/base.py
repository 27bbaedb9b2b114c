"""What every codec shares: the `Codec` interface, input checks, and `DecodeError`."""

from __future__ import annotations

import math
import numbers
from typing import ClassVar

import numpy as np

__all__ = ["Codec", "DecodeError", "check_vector"]


class DecodeError(ValueError):
    """A payload that is not a valid encoding; the message names what is wrong.

    Payloads arrive from other processes (and, in a real deployment, other machines), so decoding
    checks every length, index and value instead of trusting the sender.
    """


def check_vector(vector) -> np.ndarray:
    """`vector` as a contiguous 1-D float32 array with finite entries (no copy if it already is one).

    Codecs refuse NaN and Inf: top-k would rank them arbitrarily and the server would average them
    into the global model, so failing at the client that produced them is the useful place.
    """
    array = np.asarray(vector)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"expected a real-valued vector, got dtype {array.dtype}")
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes Inf, refused just below
        array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError("vector contains NaN or Inf (after conversion to float32)")
    return array


def check_ratio(ratio) -> float:
    """`ratio` as a float in (0, 1]."""
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"ratio must be a real number, got {ratio!r}")
    ratio = float(ratio)
    if not (math.isfinite(ratio) and 0.0 < ratio <= 1.0):
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return ratio


def check_length(length) -> int:
    """`length` (the caller's, not the payload's) as a non-negative int."""
    if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
        raise ValueError(f"length must be a non-negative integer, got {length!r}")
    return int(length)


class Codec:
    """A compression protocol: a float32 vector <-> bytes with one documented byte layout.

    Subclasses set `name` and `biased`, implement `encode`, `decode` and `size`, document their
    size formula in the class docstring, and end their module with a `register(...)` line.
    `biased` says whether E[decode(encode(v))] != v, i.e. whether error feedback is needed.
    """

    name: ClassVar[str]
    biased: ClassVar[bool]

    def __init__(self, ratio: float = 0.5):
        self.ratio = check_ratio(ratio)

    def encode(self, vector: np.ndarray) -> bytes:
        """The payload for `vector` (1-D, finite; ValueError otherwise)."""
        raise NotImplementedError

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        """A new dense float32 array of `length`; DecodeError if `payload` is malformed."""
        raise NotImplementedError

    def size(self, n: int, k: int | None = None) -> int:
        """Payload bytes for a vector of length `n` (see the class docstring)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ratio={self.ratio})"
