"""Shamir t-of-n secret sharing of 32-byte secrets over the prime field GF(2^31 - 1), vectorized with numpy.

A 32-byte secret is padded with one zero byte and cut into 11 chunks of 3 bytes (each < 2^24 < p); every
chunk gets its own random polynomial of degree t - 1 with the chunk as constant term. Shares for all
recipients and all chunks (of several secrets at once) come from one Horner evaluation over an
(recipients x chunks) int64 array. Before each reduction a Horner step reaches (acc + a_j) * x <=
2(p - 1)^2 < 2^63 (acc, a_j and x are each at most p - 1), so int64 never overflows.

Client u's x-coordinate is u + 1. Reconstruction is Lagrange interpolation at 0 with the basis for a set
of x-coordinates computed once and cached (`lagrange_basis`, an lru_cache on the tuple of x's): the server
usually rebuilds every secret from the same t responders, so one basis serves the whole round.

A share of one secret serializes to SHARE_BYTES = 44 bytes (11 little-endian uint32 field elements).
Randomness comes from os.urandom only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

PRIME = 2**31 - 1
SECRET_BYTES = 32
CHUNK_BYTES = 3
CHUNKS = -(-SECRET_BYTES // CHUNK_BYTES)  # 11
SHARE_BYTES = 4 * CHUNKS  # 44
_PAD = CHUNKS * CHUNK_BYTES - SECRET_BYTES  # 1 zero byte


class ShareError(ValueError):
    """A share or a reconstructed value that is not well-formed."""


def random_field(count: int) -> np.ndarray:
    """`count` uniform elements of GF(p) as int64, from os.urandom (rejection of the single value p)."""
    out = np.frombuffer(os.urandom(4 * count), dtype="<u4").astype(np.int64) & PRIME
    bad = np.flatnonzero(out == PRIME)
    while bad.size:
        out[bad] = np.frombuffer(os.urandom(4 * bad.size), dtype="<u4").astype(np.int64) & PRIME
        bad = bad[out[bad] == PRIME]
    return out


def secrets_to_field(secrets: Sequence[bytes]) -> np.ndarray:
    """(S, CHUNKS) int64 field elements: each secret padded and cut into 3-byte big-endian chunks."""
    for s in secrets:
        if not isinstance(s, (bytes, bytearray)) or len(s) != SECRET_BYTES:
            raise ValueError(f"a secret must be {SECRET_BYTES} bytes")
    raw = np.frombuffer(b"".join(bytes(s) + bytes(_PAD) for s in secrets), dtype=np.uint8)
    chunks = raw.reshape(len(secrets), CHUNKS, CHUNK_BYTES).astype(np.int64)
    return (chunks[..., 0] << 16) | (chunks[..., 1] << 8) | chunks[..., 2]


def field_to_secret(values: np.ndarray) -> bytes:
    """Inverse of secrets_to_field for one secret; ShareError if the values cannot be a padded secret."""
    values = np.asarray(values, dtype=np.int64)
    if values.shape != (CHUNKS,) or values.min() < 0 or values.max() >= 1 << (8 * CHUNK_BYTES):
        raise ShareError("reconstructed value is not a secret (inconsistent or forged shares)")
    raw = np.stack([(values >> 16) & 0xFF, (values >> 8) & 0xFF, values & 0xFF], axis=-1).astype(np.uint8).tobytes()
    if raw[SECRET_BYTES:] != bytes(_PAD):
        raise ShareError("reconstructed value is not a secret (inconsistent or forged shares)")
    return raw[:SECRET_BYTES]


def _check_xs(xs: Sequence[int]) -> np.ndarray:
    x = np.asarray(xs, dtype=np.int64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("need at least one x-coordinate")
    if x.min() < 1 or x.max() >= PRIME:
        raise ValueError(f"x-coordinates must lie in [1, {PRIME - 1}]")
    if np.unique(x).size != x.size:
        raise ValueError("x-coordinates must be distinct")
    return x


def share(secrets: Sequence[bytes], xs: Sequence[int], threshold: int) -> np.ndarray:
    """Shares of each secret at each x: an (len(xs), len(secrets), CHUNKS) int64 array of field elements.

    Any `threshold` shares of a secret rebuild it; fewer are uniformly distributed whatever the secret.
    """
    x = _check_xs(xs)
    if not 1 <= threshold <= x.size:
        raise ValueError(f"threshold must lie in [1, {x.size}], got {threshold}")
    constant = secrets_to_field(secrets).reshape(-1)  # (S * CHUNKS,)
    cols = constant.size
    coeffs = random_field((threshold - 1) * cols).reshape(threshold - 1, cols)  # a_1 .. a_{t-1}
    xc = x[:, None]
    acc = np.zeros((x.size, cols), dtype=np.int64)
    for j in range(threshold - 2, -1, -1):  # Horner: ((a_{t-1} x + a_{t-2}) x + ...) x + a_0
        acc += coeffs[j]
        acc *= xc
        acc %= PRIME
    acc += constant
    acc %= PRIME
    return acc.reshape(x.size, len(secrets), CHUNKS)


@lru_cache(maxsize=1024)
def lagrange_basis(xs: tuple[int, ...]) -> np.ndarray:
    """Read-only int64 weights l_j with f(0) = sum_j l_j f(x_j) mod p, for the given x-coordinates.

    l_j = prod_{i != j} x_i / (x_i - x_j); the products run as t vector steps over all j at once.
    """
    x = _check_xs(xs)
    t = x.size
    num = np.ones(t, dtype=np.int64)
    den = np.ones(t, dtype=np.int64)
    for i in range(t):
        skip = np.arange(t) == i
        num = np.where(skip, num, num * x[i] % PRIME)
        den = np.where(skip, den, den * ((x[i] - x) % PRIME) % PRIME)
    inv = np.array([pow(int(d), PRIME - 2, PRIME) for d in den], dtype=np.int64)
    basis = num * inv % PRIME
    basis.flags.writeable = False
    return basis


def reconstruct(xs: Sequence[int], shares: np.ndarray) -> np.ndarray:
    """The polynomials' values at 0 from shares at `xs`: shares has shape (len(xs), ...), result (...)."""
    xs = tuple(int(v) for v in xs)
    shares = np.asarray(shares, dtype=np.int64)
    if shares.shape[:1] != (len(xs),):
        raise ValueError(f"need one share per x-coordinate: {len(xs)} x's, shares of shape {shares.shape}")
    basis = lagrange_basis(xs).reshape((-1,) + (1,) * (shares.ndim - 1))
    # each product < 2^62; reduce before summing so the sum of t < 2^32 terms stays below 2^63
    return (shares * basis % PRIME).sum(axis=0) % PRIME


def to_bytes(values: np.ndarray) -> bytes:
    """One share (CHUNKS field elements) as SHARE_BYTES bytes."""
    values = np.asarray(values)
    if values.shape != (CHUNKS,):
        raise ValueError(f"a share has {CHUNKS} field elements, got shape {values.shape}")
    return values.astype("<u4").tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    """Parse SHARE_BYTES bytes into CHUNKS field elements; ShareError if the size or a value is wrong."""
    if not isinstance(data, (bytes, bytearray)) or len(data) != SHARE_BYTES:
        raise ShareError(f"a share must be {SHARE_BYTES} bytes")
    values = np.frombuffer(bytes(data), dtype="<u4").astype(np.int64)
    if values.max() >= PRIME:
        raise ShareError("a share holds a value outside the field")
    return values


def many_from_bytes(chunks: Sequence[bytes]) -> np.ndarray:
    """Parse many shares at once into an (m, CHUNKS) int64 array; ShareError if any is malformed."""
    if any(not isinstance(c, (bytes, bytearray)) or len(c) != SHARE_BYTES for c in chunks):
        raise ShareError(f"a share must be {SHARE_BYTES} bytes")
    values = np.frombuffer(b"".join(chunks), dtype="<u4").astype(np.int64).reshape(len(chunks), CHUNKS)
    if values.size and values.max() >= PRIME:
        raise ShareError("a share holds a value outside the field")
    return values
