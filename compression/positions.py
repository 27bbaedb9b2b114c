"""Position encodings: how a sorted set of k distinct positions in [0, n) is stored, in the smallest of four.

The payload layouts of top-k style codecs refer here. Encodings (ties go to the earlier one in this list):

  0 bitmap:  ceil(n/8) bytes; bit i (little bit order, np.packbits) set iff position i is kept.
  1 varint:  k unsigned LEB128 varints: the first position, then the gap to each next one.
             sum(varint_len(gap_i)) bytes, varint_len(g) = 1 + [g >= 2^7] + [g >= 2^14] + [g >= 2^21] + [g >= 2^28].
  2 uint16:  per 65536-entry block (ceil(n/65536) of them) the count of kept positions in it as a
             varint, then k uint16 little-endian offsets within their block.
             sum(varint_len(count_b)) + 2k bytes.
  3 rice:    Golomb-Rice codes of d_0 = p_0, d_i = p_i - p_{i-1} - 1 with parameter b (0..32):
             uint8 b; then k remainders d_i mod 2^b, b bits each (little bit order, zero padded);
             then the quotients d_i >> b in unary, each as that many 0 bits and a closing 1 bit.
             1 + ceil(k*b/8) + ceil((sum(d_i >> b) + k)/8) bytes. b starts from the mean gap and
             moves while a neighbour is smaller (local search on the exact size).

The bitmap costs n/8 bytes whatever k is; rice costs about k*(log2(n/k) + 1.5)/8 and is never much
worse than the bitmap; varint and uint16 are byte-aligned and cheaper to decode. For each k the
exact size of every candidate is computed (after an O(1) lower bound rules out the hopeless ones),
so the payload always holds the smallest. Selection lives in `selection`, the varint and Golomb-Rice
codes in `varint` and `rice`; their names stay importable from here.
"""

from __future__ import annotations

import numpy as np

from .base import DecodeError
from .rice import _gaps, _rice_decode, _rice_deltas, _rice_encode, _rice_lower_bound, _rice_parameter
from .selection import (  # noqa: F401  (re-exported: tests import them from here)
    _sampled_threshold,
    _select,
    layered_count,
    sample_index,
    select_topk,
    topk_count,
    topk_positions,
)
from .varint import _varint_decode, _varint_encode, _varint_lengths

__all__ = [
    "topk_count",
    "topk_positions",
    "select_topk",
    "sample_index",
    "BITMAP",
    "VARINT",
    "UINT16",
    "RICE",
    "ENCODING_NAMES",
    "pack_positions",
    "unpack_positions",
    "position_sizes",
    "encode_positions",
    "decode_positions",
]

BITMAP, VARINT, UINT16, RICE = 0, 1, 2, 3
ENCODING_NAMES = ("bitmap", "varint", "uint16", "rice")
BLOCK = 1 << 16


def _uint16_counts(positions: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(positions >> 16, minlength=(n + BLOCK - 1) // BLOCK)


def position_sizes(positions: np.ndarray, n: int) -> dict[str, int]:
    """Exact bytes of every encoding for these sorted positions (rice at the parameter it would use)."""
    positions = np.asarray(positions, dtype=np.int64)
    gaps = _gaps(positions)
    return {
        "bitmap": (n + 7) // 8,
        "varint": int(_varint_lengths(gaps).sum()),
        "uint16": int(_varint_lengths(_uint16_counts(positions, n)).sum()) + 2 * positions.size,
        "rice": _rice_parameter(_rice_deltas(positions, gaps))[1],
    }


def pack_positions(positions: np.ndarray, n: int, mask: np.ndarray | None = None) -> tuple[int, bytes]:
    """(encoding, bytes) of the smallest encoding for sorted int64 positions (ties to the earlier
    encoding); `mask`, if given, is their boolean mask (saves rebuilding it for the bitmap).

    Each candidate's exact size costs a pass over the positions; a candidate whose O(1) lower bound
    cannot beat the best so far is skipped (at ratio 0.5 only the bitmap is ever computed).
    """
    k = positions.size
    bounds = sorted(((k, VARINT), (2 * k + (n + BLOCK - 1) // BLOCK, UINT16),
                     (_rice_lower_bound(k, int(positions[-1])), RICE)))
    best, best_size = BITMAP, (n + 7) // 8
    gaps = counts = deltas = None
    rice_b = 0
    for bound, encoding in bounds:
        if (bound, encoding) >= (best_size, best):
            continue
        if encoding == VARINT:
            gaps = _gaps(positions) if gaps is None else gaps
            size = int(_varint_lengths(gaps).sum())
        elif encoding == UINT16:
            counts = _uint16_counts(positions, n)
            size = int(_varint_lengths(counts).sum()) + 2 * k
        else:
            gaps = _gaps(positions) if gaps is None else gaps
            deltas = _rice_deltas(positions, gaps)
            rice_b, size = _rice_parameter(deltas)
        if (size, encoding) < (best_size, best):
            best, best_size = encoding, size
    if best == BITMAP:
        if mask is None:
            mask = np.zeros(n, dtype=bool)
            mask[positions] = True
        return BITMAP, np.packbits(mask, bitorder="little").tobytes()
    if best == VARINT:
        return VARINT, _varint_encode(gaps)
    if best == UINT16:
        return UINT16, _varint_encode(counts) + (positions & 0xFFFF).astype("<u2").tobytes()
    return RICE, _rice_encode(deltas, rice_b)


def unpack_positions(encoding: int, data: np.ndarray, n: int, k: int, what: str = "topk") -> tuple[np.ndarray, int]:
    """(sorted int64 positions, bytes they took) from the start of uint8 `data`; DecodeError if invalid.

    `data` may run on past the positions (the values follow them in a payload).
    """
    if encoding == BITMAP:
        size = (n + 7) // 8
        if data.size < size:
            raise DecodeError(f"{what} payload truncated: bitmap needs {size} bytes, got {data.size}")
        bitmap = data[:size]
        if n % 8 and bitmap[-1] >> (n % 8):
            raise DecodeError(f"{what} bitmap has bits set beyond length {n}")
        bits = np.unpackbits(bitmap, count=n, bitorder="little").view(bool)  # flatnonzero: cheaper on bool than uint8
        positions = np.flatnonzero(bits)
        if positions.size != k:
            raise DecodeError(f"{what} bitmap has {positions.size} bits set, expected k={k}")
        return positions.astype(np.int64, copy=False), size
    if encoding == VARINT:
        gaps, size = _varint_decode(data, k, what)
        return _read_gaps(gaps, n, what), size
    if encoding == UINT16:
        return _read_uint16(data, n, k, what)
    if encoding == RICE:
        return _rice_decode(data, n, k, what)
    raise DecodeError(f"unknown {what} position encoding {encoding}")


def _read_gaps(gaps: np.ndarray, n: int, what: str) -> np.ndarray:
    """Positions from first-index-then-gaps, checked to be strictly increasing and below n."""
    if (gaps[1:] == 0).any():
        raise DecodeError(f"{what} indices not strictly increasing")
    # Capping each gap at n keeps the uint64 sum from wrapping (k <= n < 2**32) and changes no
    # position below n, so the first position >= n is still found where it really is.
    positions = np.cumsum(np.minimum(gaps, np.uint64(n)))
    if positions[-1] >= n:
        i = int(np.argmax(positions >= n))
        index = (int(positions[i - 1]) if i else 0) + int(gaps[i])
        raise DecodeError(f"{what} index {index} out of range for length {n}")
    return positions.astype(np.int64)


def _read_uint16(data: np.ndarray, n: int, k: int, what: str) -> tuple[np.ndarray, int]:
    blocks = (n + BLOCK - 1) // BLOCK
    counts, used = _varint_decode(data, blocks, what)
    capacity = np.full(blocks, BLOCK, dtype=np.uint64)
    capacity[-1] = n - (blocks - 1) * BLOCK
    if (counts > capacity).any():
        block = int(np.argmax(counts > capacity))
        raise DecodeError(f"{what} block {block} claims {int(counts[block])} positions, more than it holds")
    if int(counts.sum()) != k:
        raise DecodeError(f"{what} block counts sum to {int(counts.sum())}, expected k={k}")
    if data.size < used + 2 * k:
        raise DecodeError(f"{what} payload truncated: uint16 offsets need {2 * k} bytes, got {data.size - used}")
    offsets = data[used:used + 2 * k].view("<u2").astype(np.int64)
    positions = np.repeat(np.arange(blocks, dtype=np.int64) * BLOCK, counts.astype(np.int64)) + offsets
    if k > 1 and (np.diff(positions) <= 0).any():
        raise DecodeError(f"{what} indices not strictly increasing")
    if positions[-1] >= n:
        raise DecodeError(f"{what} index {int(positions[-1])} out of range for length {n}")
    return positions, used + 2 * k


# --- a position set on its own (the broadcast's shared index set) ----------------------------------

def encode_positions(positions: np.ndarray, n: int) -> bytes:
    """A sorted position set alone: 1 byte encoding, then the smallest of the encodings above.
    Used to broadcast a shared index set."""
    encoding, data = pack_positions(check_positions(positions, n), n)
    return bytes([encoding]) + data


def decode_positions(block: bytes, n: int, k: int) -> np.ndarray:
    """Inverse of `encode_positions`, strictly checked (DecodeError naming the problem)."""
    if len(block) < 1:
        raise DecodeError("position block truncated: no encoding byte")
    if block[0] >= len(ENCODING_NAMES):
        raise DecodeError(f"unknown position block encoding {block[0]}")
    if not 1 <= k <= n:
        raise DecodeError(f"position block k={k} out of range [1, {n}]")
    positions, size = unpack_positions(block[0], np.frombuffer(block, dtype=np.uint8, offset=1), n, k,
                                       "position block")
    if len(block) != 1 + size:
        raise DecodeError(f"position block has trailing bytes: expected {1 + size} bytes, got {len(block)}")
    return positions


def check_positions(positions, n: int) -> np.ndarray:
    """Caller-given positions as int64, checked: 1 to n of them, strictly increasing, in [0, n)."""
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D integer array, got {positions.dtype} of shape {positions.shape}")
    if not 1 <= positions.size <= n:
        raise ValueError(f"need between 1 and {n} positions, got {positions.size}")
    if n >= 2**32:
        raise ValueError(f"topk payloads hold lengths below 2**32, got {n}")
    positions = positions.astype(np.int64, copy=False)
    if positions[0] < 0 or positions[-1] >= n or (np.diff(positions) <= 0).any():
        raise ValueError(f"positions must be strictly increasing and in [0, {n})")
    return positions
