"""What every codec shares: the `Codec` interface, input checks, and `DecodeError`."""

from __future__ import annotations

import math
import numbers
import struct
import zlib
from fractions import Fraction
from typing import ClassVar

import numpy as np

__all__ = ["Codec", "DecodeError", "check_vector", "check_ratio", "check_length", "check_seed", "input_seed",
           "read_header", "check_payload_length"]


class DecodeError(ValueError):
    """A payload that is not a valid encoding; the message names what is wrong.

    Payloads arrive from other processes (and, in a real deployment, other machines), so decoding
    checks every length, index and value instead of trusting the sender.
    """


def check_vector(vector, finite: bool = True) -> np.ndarray:
    """`vector` as a contiguous 1-D float32 array with finite entries (no copy if it already is one).

    Codecs refuse NaN and Inf: top-k would rank them arbitrarily and the server would average them
    into the global model, so failing at the client that produced them is the useful place.
    `finite=False` leaves that check to a caller that finds it cheaper (top-k checks the largest
    magnitude it computes anyway).
    """
    array = vector if type(vector) is np.ndarray else np.asarray(vector)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {array.shape}")
    if array.dtype != np.float32 or not array.flags.c_contiguous:
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise TypeError(f"expected a real-valued vector, got dtype {array.dtype}")
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes Inf, refused just below
            array = np.ascontiguousarray(array, dtype=np.float32)
    if finite and not np.isfinite(array).all():
        raise ValueError(NON_FINITE)
    return array


NON_FINITE = "vector contains NaN or Inf (after conversion to float32)"


def check_ratio(ratio) -> float:
    """`ratio` as a float in (0, 1]; a numpy float as the decimal it prints as (`np.float32(0.1)` is 0.1, not
    float64's 0.10000000149011612, which keeps 11 of 100 entries)."""
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"ratio must be a real number, got {ratio!r}")
    ratio = float(str(ratio)) if isinstance(ratio, np.floating) else float(ratio)
    if not (math.isfinite(ratio) and 0.0 < ratio <= 1.0):
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return ratio


def check_length(length) -> int:
    """`length` (the caller's, not the payload's) as a non-negative int."""
    if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
        raise ValueError(f"length must be a non-negative integer, got {length!r}")
    return int(length)


def read_header(what: str, payload: bytes, header: struct.Struct, version: int) -> tuple:
    """A payload's header fields, once it is known to hold a whole header of format `version` (its first field)."""
    if len(payload) < header.size:
        raise DecodeError(f"{what} payload truncated: expected at least {header.size} bytes, got {len(payload)}")
    fields = header.unpack_from(payload)
    if fields[0] != version:
        raise DecodeError(f"unsupported {what} format version {fields[0]} (expected {version})")
    return fields


def check_payload_length(what: str, n: int, length: int) -> None:
    """The vector length a payload declares must be the one the receiver asked for."""
    if n != length:
        raise DecodeError(f"{what} payload is for length {n}, but length {length} was requested")


def check_seed(seed) -> int | None:
    """A randomized codec's `seed` option: a non-negative int, or None for fresh OS entropy."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    return int(seed)


def decimal(x: float) -> Fraction:
    """`x` as the decimal it prints as, the one a config names: in binary 0.07 * 100 is 7.000000000000001 and
    33 / 1.1 is 29.999999999999996, where the counts meant are 7 and 30."""
    return Fraction(repr(float(x)))


def input_seed(seed: int | None, vector: np.ndarray) -> int:
    """The 64-bit seed of one randomized encode.

    `seed` None: fresh OS entropy (not reproducible). An int: a hash of (seed, the vector's CRC-32,
    its length), so a run is reproducible and does not depend on how clients are spread over
    workers, while different clients' updates still draw different random numbers. The codecs
    treat it as random; for a fixed input it is a fixed (pseudo-random) choice.
    """
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    return int(np.random.SeedSequence([seed, zlib.crc32(vector), vector.size]).generate_state(1, np.uint64)[0])


class Codec:
    """A compression protocol: a float32 vector <-> bytes with one documented byte layout.

    Subclasses set `name` and `biased`, implement `encode`, `decode` and `size`, document their
    size formula in the class docstring, and end their module with a `register(...)` line.

    - `Cls(ratio=0.5, **options)`: every option has a default, so `compression.get(name)(ratio)`
      always works. The same class serves the clients (updates) and the server (broadcast).
    - `decode` reads everything it needs from the payload: the receiver builds the codec as
      `compression.get(name)()`, without the sender's ratio or options.
    - `biased` says whether E[decode(encode(v))] != v, i.e. whether error feedback is needed; a
      codec whose bias depends on an option sets it per instance.
    - `uses_ratio` is False for dense codecs that accept `ratio` and ignore it.
    """

    name: ClassVar[str]
    biased: bool
    uses_ratio: ClassVar[bool] = True

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

    def check_sender(self, payload: bytes, length: int) -> None:
        """DecodeError unless `payload` could come from a codec configured as this one. The server calls it
        before `decode`: a codec whose decoding cost rests on parameters the payload names (not only on its
        size, which the wire bounds) refuses parameters other than its own here."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ratio={self.ratio})"
