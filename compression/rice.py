"""Golomb-Rice coding of sorted positions: encoding 3 of `compression.positions` (byte layout there).

Separate from `positions` because its parameter search and O(1) size bound are arithmetic of their own.
"""

from __future__ import annotations

import math

import numpy as np

from .base import DecodeError
from .packing import pack_codes, packed_size, unpack_codes

_MAX_RICE_PARAMETER = 32


def _gaps(positions: np.ndarray) -> np.ndarray:
    """The first position, then p_i - p_{i-1} (int64; written in place, where np.diff with prepend copies)."""
    gaps = np.empty_like(positions)
    gaps[0] = positions[0]
    np.subtract(positions[1:], positions[:-1], out=gaps[1:])
    return gaps


def _rice_deltas(positions: np.ndarray, gaps: np.ndarray | None = None) -> np.ndarray:
    """d_0 = p_0, d_i = p_i - p_{i-1} - 1 (int64, all >= 0 for strictly increasing positions)."""
    deltas = (_gaps(positions) if gaps is None else gaps) - 1
    deltas[0] += 1
    return deltas


def _rice_size(deltas: np.ndarray, b: int) -> int:
    k = deltas.size
    return 1 + packed_size(k, b) + packed_size(int((deltas >> b).sum()) + k, 1)


def _rice_lower_bound(k: int, last: int) -> int:
    """A lower bound on the rice size for k positions ending at `last`, in O(1).

    With T = last + 1 = sum(d_i + 1): the unary part has sum(d_i >> b) + k >= max(T / 2^b, k) bits,
    so size(b) >= g(b) = 1 + ceil(k*b/8) + ceil(max(ceil(T/2^b), k)/8), and also
    size(b) >= 1 + f(b)/8 with f(b) = k*b + max(T/2^b, k), which is convex in real b with its minimum
    at b* = log2(T ln2 / k). So: g at the two integers around b*, and f one step further out on
    each side (f only grows beyond them), bound every b.
    """
    total = last + 1
    best_real = min(max(math.log2(total * math.log(2) / k), 0.0), _MAX_RICE_PARAMETER)
    low, high = math.floor(best_real), min(math.floor(best_real) + 1, _MAX_RICE_PARAMETER)
    bound = min(1 + packed_size(k, b) + packed_size(max((total + (1 << b) - 1) >> b, k), 1) for b in (low, high))
    for b in (low - 1, high + 1):
        if 0 <= b <= _MAX_RICE_PARAMETER:
            bits = k * b + max(total / 2**b, k)
            bound = min(bound, 1 + math.ceil(bits / 8 - 1e-9))
    return bound


def _rice_parameter(deltas: np.ndarray) -> tuple[int, int]:
    """(b, size): start at floor(log2(mean gap * ln2)), move to a smaller neighbour while there is one."""
    k = deltas.size
    mean = (int(deltas.sum()) + k) / k
    b = min(max(math.floor(math.log2(max(mean * math.log(2), 1.0))), 0), _MAX_RICE_PARAMETER)
    size = _rice_size(deltas, b)
    for step in (1, -1):
        moved = False
        while 0 <= b + step <= _MAX_RICE_PARAMETER:
            candidate = _rice_size(deltas, b + step)
            if candidate >= size:
                break
            b, size, moved = b + step, candidate, True
        if moved:
            break
    return b, size


def _rice_encode(deltas: np.ndarray, b: int) -> bytes:
    remainders = pack_codes(deltas & ((1 << b) - 1), b) if b else b""
    ends = np.cumsum((deltas >> b) + 1) - 1  # each quotient q: q zero bits, then a one
    bits = np.zeros(int(ends[-1]) + 1, dtype=bool)
    bits[ends] = True
    return bytes([b]) + remainders + np.packbits(bits, bitorder="little").tobytes()


def _rice_decode(data: np.ndarray, n: int, k: int, what: str) -> tuple[np.ndarray, int]:
    if data.size < 1:
        raise DecodeError(f"{what} payload truncated: no rice parameter")
    b = int(data[0])
    if b > _MAX_RICE_PARAMETER:
        raise DecodeError(f"{what} rice parameter {b} out of range [0, {_MAX_RICE_PARAMETER}]")
    remainder_size = packed_size(k, b)
    if data.size < 1 + remainder_size:
        raise DecodeError(f"{what} payload truncated: rice remainders need {remainder_size} bytes, "
                          f"got {data.size - 1}")
    remainders = unpack_codes(data[1:1 + remainder_size], k, b, what).astype(np.uint64) if b else 0
    # Valid positions below n have sum(d_i) <= n - k, so the unary part has at most this many bits:
    longest = packed_size(((n - k) >> b) + k, 1)
    window = data[1 + remainder_size: 1 + remainder_size + longest]
    ones = np.flatnonzero(np.unpackbits(window, bitorder="little"))
    if ones.size < k:
        if window.size == longest:
            raise DecodeError(f"{what} rice positions run past length {n}")
        raise DecodeError(f"{what} payload truncated: rice unary part ends after {ones.size} of {k} values")
    unary_size = int(ones[k - 1]) // 8 + 1
    if ones.size > k and ones[k] < 8 * unary_size:
        raise DecodeError(f"{what} rice unary part has padding bits set")
    quotients = _rice_deltas(ones[:k])  # zeros between consecutive ones
    quotients = np.minimum(quotients, (n >> b) + 1).astype(np.uint64)  # larger is out of range anyway
    deltas = (quotients << np.uint64(b)) | remainders
    positions = np.cumsum(np.minimum(deltas, np.uint64(n)) + np.uint64(1)) - np.uint64(1)
    if positions[-1] >= n:
        raise DecodeError(f"{what} rice positions run past length {n}")
    return positions.astype(np.int64), 1 + remainder_size + unary_size
