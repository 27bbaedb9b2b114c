"""Unsigned LEB128 varints, vectorized: the byte-aligned integers of the varint and uint16 position encodings.

Separate from `positions` because it is a plain integer codec, with no notion of a position set.
"""

from __future__ import annotations

import numpy as np

from .base import DecodeError

_MAX_VARINT_BYTES = 5  # enough for any uint32
_VARINT_STEPS = np.array([1 << 7, 1 << 14, 1 << 21, 1 << 28], dtype=np.int64)


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each value as an unsigned LEB128 varint (values < 2**35)."""
    return np.searchsorted(_VARINT_STEPS, values.astype(np.int64, copy=False), side="right") + 1


def _varint_encode(values: np.ndarray) -> bytes:
    """Unsigned LEB128: 7 bits per byte, low bits first, high bit set on all but the last byte.

    Vectorized: one pass per byte position (at most 5), never one per value.
    """
    values = values.astype(np.uint64)
    lengths = _varint_lengths(values)
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for j in range(_MAX_VARINT_BYTES):
        has = np.flatnonzero(lengths > j)
        if has.size == 0:
            break
        byte = (values[has] >> np.uint64(7 * j)) & np.uint64(0x7F)
        byte |= np.where(lengths[has] > j + 1, np.uint64(0x80), np.uint64(0))
        out[starts[has] + j] = byte
    return out.tobytes()


def _varint_decode(data: np.ndarray, count: int, what: str = "topk") -> tuple[np.ndarray, int]:
    """The first `count` varints of `data` (uint8) as uint64, and how many bytes they took."""
    window = data[: count * _MAX_VARINT_BYTES]  # `count` varints can't take more bytes than this
    ends = np.flatnonzero(window < 0x80)[:count]  # a byte without the continuation bit ends a varint
    if ends.size < count:
        if window.size == count * _MAX_VARINT_BYTES:  # room for `count` varints of legal length
            raise DecodeError(f"{what} varint longer than {_MAX_VARINT_BYTES} bytes")
        raise DecodeError(f"{what} payload truncated: varint stream ends after {ends.size} of {count} values")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if (lengths > _MAX_VARINT_BYTES).any():
        raise DecodeError(f"{what} varint longer than {_MAX_VARINT_BYTES} bytes")
    if ((lengths > 1) & (data[ends] == 0)).any():
        raise DecodeError(f"{what} varint not minimally encoded")
    values = np.zeros(count, dtype=np.uint64)
    for j in range(_MAX_VARINT_BYTES):
        has = np.flatnonzero(lengths > j)
        if has.size == 0:
            break
        values[has] |= (data[starts[has] + j] & np.uint8(0x7F)).astype(np.uint64) << np.uint64(7 * j)
    return values, int(ends[-1]) + 1
