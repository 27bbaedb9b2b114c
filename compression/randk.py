"""Random-k sparsification: k random positions, drawn from a seed the payload carries instead of the positions."""

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
from .packing import check_encodable_length, check_total
from .registry import register
from .selection import topk_count

__all__ = ["RandKCompression", "randk_positions"]

VERSION = 1
_HEADER = struct.Struct("<BBIIQ")  # version, flags, n, k, seed
_UNBIASED = 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def randk_positions(n: int, k: int, seed: int) -> np.ndarray:
    """Sorted int64 positions of a uniformly random k-subset of [0, n), a pure function of (n, k, seed).

    Small k (k <= n/64): np.random.Generator.choice without replacement. Otherwise: a Bernoulli(k/n)
    mask, then random members dropped or random non-members added until exactly k are set (both
    with Generator.choice); the procedure treats all positions alike, so every k-subset is equally
    likely, and it is O(n) where choice would permute all n. Sender and receiver must run the same
    numpy generator code (numpy does not promise Generator.choice's stream across versions).
    """
    if k == n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if 64 * k <= n:
        return np.sort(rng.choice(n, size=k, replace=False, shuffle=False)).astype(np.int64)
    mask = rng.random(n, dtype=np.float32) < np.float32(k / n)
    count = int(np.count_nonzero(mask))
    if count > k:
        members = np.flatnonzero(mask)
        mask[members[rng.choice(count, size=count - k, replace=False, shuffle=False)]] = False
    elif count < k:
        others = np.flatnonzero(~mask)
        mask[others[rng.choice(others.size, size=k - count, replace=False, shuffle=False)]] = True
    return np.flatnonzero(mask).astype(np.int64, copy=False)


class RandKCompression(Codec):
    """Keep k = ceil(ratio * n) positions chosen uniformly at random; the payload carries the seed.

    Options:
      unbiased: False (default) sends the values as they are: biased, E[decode] = (k/n) v, so use
                it with error feedback. True has the decoder scale them by n/k: E[decode] = v, with
                variance (n/k - 1) v_i^2 per entry (the flag travels in the payload).
      seed:     0 (default) draws each payload's seed from (seed, the input's CRC-32) -- reproducible,
                independent of the worker a client runs on; None draws it from OS entropy.

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint8   flags: bit 0 = unbiased (decoder multiplies by n/k); other bits 0
        uint32  n
        uint32  k (1 <= k <= n)
        uint64  seed of the positions: `randk_positions(n, k, seed)`
        k float32 values, in increasing position order

    Size: 18 + 4k bytes.
    """

    name = "randk"
    biased = True

    def __init__(self, ratio: float = 0.5, unbiased: bool = False, seed: int | None = 0):
        super().__init__(ratio)
        if not isinstance(unbiased, (bool, np.bool_)):
            raise TypeError(f"unbiased must be True or False, got {unbiased!r}")
        self.unbiased, self.seed = bool(unbiased), check_seed(seed)
        self.biased = not self.unbiased

    def k_for(self, n: int) -> int:
        return topk_count(n, self.ratio)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        n = vector.size
        check_encodable_length(n, "randk", allow_empty=False)
        k = self.k_for(n)
        seed = input_seed(self.seed, vector)
        values = vector.take(randk_positions(n, k, seed))
        if self.unbiased and k < n and float(np.abs(values).max(initial=0)) * (n / k) > _FLOAT32_MAX:
            raise ValueError(f"randk: scaling by n/k = {n / k:.6g} makes a value overflow float32")
        flags = _UNBIASED if self.unbiased else 0
        return _HEADER.pack(VERSION, flags, n, k, seed) + values.astype("<f4", copy=False).tobytes()

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        positions, values = self.decode_sparse(payload, length)
        dense = np.zeros(length, dtype=np.float32)
        dense[positions] = values
        return dense

    def decode_sparse(self, payload: bytes, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted int64 positions, float32 values as decoded, i.e. scaled if unbiased)."""
        length = check_length(length)
        _, flags, n, k, seed = read_header("randk", payload, _HEADER, VERSION)
        if flags & ~_UNBIASED:
            raise DecodeError(f"randk flags {flags:#04x} have unknown bits set")
        check_payload_length("randk", n, length)
        if not 1 <= k <= n:
            raise DecodeError(f"randk k={k} out of range [1, {n}]")
        check_total("randk", len(payload), _HEADER.size + 4 * k)
        values = np.frombuffer(payload, dtype="<f4", count=k, offset=_HEADER.size).astype(np.float32)
        if not np.isfinite(values).all():  # before the float64 scaling: casting a signalling NaN warns
            raise DecodeError("randk payload contains NaN or Inf values")
        if flags & _UNBIASED and k < n:
            with np.errstate(over="ignore"):  # overflow becomes Inf, refused just below
                values = (values.astype(np.float64) * (n / k)).astype(np.float32)
            if not np.isfinite(values).all():
                raise DecodeError("randk payload contains values that overflow float32 after scaling by n/k")
        return randk_positions(n, k, seed), values

    def size(self, n: int, k: int | None = None) -> int:
        k = self.k_for(n) if k is None else k
        return _HEADER.size + 4 * k

    def __repr__(self) -> str:
        return f"RandKCompression(ratio={self.ratio}, unbiased={self.unbiased}, seed={self.seed!r})"


register("randk", RandKCompression)
