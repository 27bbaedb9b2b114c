"""Top-k sparsification: send the k largest-magnitude entries, their positions and values."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np

from .base import Codec, DecodeError, check_length, check_vector
from .registry import register

__all__ = ["TopKCompression", "topk_positions", "topk_count", "encode_positions", "decode_positions"]

VERSION = 1
BITMAP, INDICES = 0, 1
_HEADER = struct.Struct("<BBII")  # version, position encoding, n, k
_MAX_VARINT_BYTES = 5  # enough for any uint32


def topk_count(n: int, ratio: float) -> int:
    """k = ceil(ratio * n), clamped to [1, n], with `ratio` read as the decimal it prints as.

    In binary floating point 0.07 * 100 is 7.000000000000001, whose ceiling is 8; reading the ratio
    as the decimal the user wrote in the config gives the k they meant (7).
    """
    return min(max(math.ceil(Fraction(repr(float(ratio))) * n), 1), n)


def topk_positions(vector: np.ndarray, k: int) -> np.ndarray:
    """Sorted int64 positions of exactly `k` largest |vector| entries; ties go to the lowest index.

    An exact threshold from np.partition, then flatnonzero (a boolean-mask gather is slower; see
    DESIGN.md, "Lessons from the anchors"). `vector` must be 1-D and finite.
    """
    magnitude = np.abs(np.asarray(vector))
    n = magnitude.size
    if magnitude.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {magnitude.shape}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    if not np.isfinite(magnitude).all():
        raise ValueError("vector contains NaN or Inf")
    if k == n:
        return np.arange(n, dtype=np.int64)
    threshold = np.partition(magnitude, n - k)[n - k]
    at_least = magnitude >= threshold
    positions = np.flatnonzero(at_least)
    if positions.size > k:  # too many ties at the threshold: keep the lowest-index ones
        ties = np.flatnonzero(magnitude == threshold)
        at_least[ties[k - (positions.size - ties.size):]] = False
        positions = np.flatnonzero(at_least)
    return positions.astype(np.int64, copy=False)


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each value as an unsigned LEB128 varint (values < 2**35)."""
    lengths = np.ones(values.shape, dtype=np.int64)
    for shift in (7, 14, 21, 28):
        lengths += values >= (1 << shift)
    return lengths


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


def _varint_decode(data: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """The first `count` varints of `data` (uint8) as uint64, and how many bytes they took."""
    window = data[: count * _MAX_VARINT_BYTES]  # `count` varints can't take more bytes than this
    ends = np.flatnonzero(window < 0x80)[:count]  # a byte without the continuation bit ends a varint
    if ends.size < count:
        if window.size == count * _MAX_VARINT_BYTES:  # room for `count` varints of legal length
            raise DecodeError(f"topk varint longer than {_MAX_VARINT_BYTES} bytes")
        raise DecodeError(f"topk payload truncated: varint stream ends after {ends.size} of {count} indices")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if (lengths > _MAX_VARINT_BYTES).any():
        raise DecodeError(f"topk varint longer than {_MAX_VARINT_BYTES} bytes")
    if ((lengths > 1) & (data[ends] == 0)).any():
        raise DecodeError("topk varint not minimally encoded")
    values = np.zeros(count, dtype=np.uint64)
    for j in range(_MAX_VARINT_BYTES):
        has = np.flatnonzero(lengths > j)
        if has.size == 0:
            break
        values[has] |= (data[starts[has] + j] & np.uint8(0x7F)).astype(np.uint64) << np.uint64(7 * j)
    return values, int(ends[-1]) + 1


class TopKCompression(Codec):
    """Keep the k = ceil(ratio * n) largest-magnitude entries (see `topk_count`); zero the rest.

    Payload, all little-endian:
        uint8   format version (1)
        uint8   position encoding: 0 = bitmap, 1 = delta-varint indices
        uint32  n, the vector's length
        uint32  k, the number of kept entries (1 <= k <= n)
        positions:
            bitmap:  ceil(n/8) bytes, bit i (little bit order, np.packbits) set iff entry i is kept
            indices: k unsigned LEB128 varints: the first position, then the gaps to the next
        k float32 values, in increasing position order

    Size: 10 + min(ceil(n/8), sum(varint_len(gap_i))) + 4k bytes, where gap_0 is the first position,
    varint_len(g) = 1 + [g >= 2^7] + [g >= 2^14] + [g >= 2^21] + [g >= 2^28], and the encoding is
    whichever of the two is smaller for these positions (ties go to the bitmap).
    """

    name = "topk"
    biased = True

    def k_for(self, n: int) -> int:
        """How many entries a vector of length `n` keeps at this ratio."""
        return topk_count(n, self.ratio)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        if vector.size == 0:
            raise ValueError("topk cannot encode an empty vector")
        if vector.size >= 2**32:
            raise ValueError(f"topk payloads hold lengths below 2**32, got {vector.size}")
        return self._pack(vector, topk_positions(vector, self.k_for(vector.size)))

    def encode_at(self, vector: np.ndarray, positions: np.ndarray) -> bytes:
        """The payload that sends `vector` at the given sorted, distinct `positions` (1 to n of them)."""
        vector = check_vector(vector)
        return self._pack(vector, _check_positions(positions, vector.size))

    def _pack(self, vector: np.ndarray, positions: np.ndarray) -> bytes:
        """The payload for checked input: a finite float32 vector and valid int64 positions."""
        encoding, position_bytes = _pack_positions(positions, vector.size)
        values = vector.take(positions).astype("<f4", copy=False).tobytes()
        return b"".join((_HEADER.pack(VERSION, encoding, vector.size, positions.size), position_bytes, values))

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        positions, values = self.decode_sparse(payload, length)
        dense = np.zeros(length, dtype=np.float32)
        dense[positions] = values  # integer scatter; measured faster than np.put here
        return dense

    def decode_sparse(self, payload: bytes, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted int64 positions, float32 values) of a payload for a vector of `length`."""
        length = check_length(length)
        encoding, n, k = _read_header(payload)
        if n != length:
            raise DecodeError(f"topk payload is for length {n}, but length {length} was requested")
        if not 1 <= k <= n:
            raise DecodeError(f"topk k={k} out of range [1, {n}]")
        data = np.frombuffer(payload, dtype=np.uint8, offset=_HEADER.size)
        positions, position_size = _unpack_positions(encoding, data, n, k)
        _check_total(len(payload), _HEADER.size + position_size + 4 * k)
        values = np.frombuffer(payload, dtype="<f4", count=k, offset=_HEADER.size + position_size)
        if not np.isfinite(values).all():
            raise DecodeError("topk payload contains NaN or Inf values")
        return positions, values.astype(np.float32)  # astype copies: writable, native byte order

    def size(self, n: int, k: int | None = None) -> int:
        """An upper bound on the payload size (k defaults to this ratio's k for n).

        The exact size depends on where the positions fall; see `encoded_size`. The bound takes
        every gap at its largest varint length.
        """
        k = self.k_for(n) if k is None else k
        return _HEADER.size + min((n + 7) // 8, k * int(_varint_lengths(np.array([max(n - 1, 0)]))[0])) + 4 * k

    def encoded_size(self, positions: np.ndarray, n: int) -> int:
        """len(encode_at(v, positions)) for any v of length n, computed without encoding."""
        positions = np.asarray(positions, dtype=np.int64)
        gaps = np.diff(positions, prepend=0)
        bitmap = (n + 7) // 8
        position_size = int(_varint_lengths(gaps).sum()) if _indices_smaller(gaps, n) else bitmap
        return _HEADER.size + position_size + 4 * positions.size

    @staticmethod
    def position_encoding(payload: bytes) -> str:
        """'bitmap' or 'indices': how this payload stores its positions."""
        encoding, _, _ = _read_header(payload)
        return "bitmap" if encoding == BITMAP else "indices"


def encode_positions(positions: np.ndarray, n: int) -> bytes:
    """A sorted position set alone, as top-k stores it: 1 byte encoding, then the bitmap or the
    delta-varint indices, whichever is smaller. Used to broadcast a shared index set."""
    encoding, data = _pack_positions(_check_positions(positions, n), n)
    return bytes([encoding]) + data


def decode_positions(block: bytes, n: int, k: int) -> np.ndarray:
    """Inverse of `encode_positions`, strictly checked (DecodeError naming the problem)."""
    if len(block) < 1:
        raise DecodeError("position block truncated: no encoding byte")
    if block[0] not in (BITMAP, INDICES):
        raise DecodeError(f"unknown topk position encoding {block[0]}")
    if not 1 <= k <= n:
        raise DecodeError(f"topk k={k} out of range [1, {n}]")
    positions, size = _unpack_positions(block[0], np.frombuffer(block, dtype=np.uint8, offset=1), n, k)
    _check_total(len(block), 1 + size)
    return positions


def _pack_positions(positions: np.ndarray, n: int) -> tuple[int, bytes]:
    gaps = np.diff(positions, prepend=0)
    if _indices_smaller(gaps, n):
        return INDICES, _varint_encode(gaps)
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return BITMAP, np.packbits(mask, bitorder="little").tobytes()


def _unpack_positions(encoding: int, data: np.ndarray, n: int, k: int) -> tuple[np.ndarray, int]:
    """(positions, bytes they took) from the start of `data`."""
    if encoding == BITMAP:
        size = (n + 7) // 8
        if data.size < size:
            raise DecodeError(f"topk payload truncated: bitmap needs {size} bytes, got {data.size}")
        return _read_bitmap(data[:size], n, k), size
    gaps, size = _varint_decode(data, k)
    return _read_gaps(gaps, n), size


def _indices_smaller(gaps: np.ndarray, n: int) -> bool:
    """Whether delta-varint indices take fewer bytes than a bitmap (ties go to the bitmap)."""
    bitmap = (n + 7) // 8
    if gaps.size >= bitmap:  # every varint takes at least one byte
        return False
    return int(_varint_lengths(gaps).sum()) < bitmap


def _check_positions(positions, n: int) -> np.ndarray:
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


def _read_header(payload: bytes) -> tuple[int, int, int]:
    if len(payload) < _HEADER.size:
        raise DecodeError(f"topk payload truncated: expected at least {_HEADER.size} bytes, got {len(payload)}")
    version, encoding, n, k = _HEADER.unpack_from(payload)
    if version != VERSION:
        raise DecodeError(f"unsupported topk format version {version} (expected {VERSION})")
    if encoding not in (BITMAP, INDICES):
        raise DecodeError(f"unknown topk position encoding {encoding}")
    return encoding, n, k


def _check_total(actual: int, expected: int) -> None:
    if actual < expected:
        raise DecodeError(f"topk payload truncated: expected {expected} bytes, got {actual}")
    if actual > expected:
        raise DecodeError(f"topk payload has trailing bytes: expected {expected} bytes, got {actual}")


def _read_bitmap(bitmap: np.ndarray, n: int, k: int) -> np.ndarray:
    if n % 8 and bitmap[-1] >> (n % 8):
        raise DecodeError(f"topk bitmap has bits set beyond length {n}")
    bits = np.unpackbits(bitmap, count=n, bitorder="little").view(bool)  # flatnonzero on bool is ~10x faster
    positions = np.flatnonzero(bits)
    if positions.size != k:
        raise DecodeError(f"topk bitmap has {positions.size} bits set, expected k={k}")
    return positions.astype(np.int64, copy=False)


def _read_gaps(gaps: np.ndarray, n: int) -> np.ndarray:
    """Positions from first-index-then-gaps, checked to be strictly increasing and below n."""
    if (gaps[1:] == 0).any():
        raise DecodeError("topk indices not strictly increasing")
    # Capping each gap at n keeps the uint64 sum from wrapping (k <= n < 2**32) and changes no
    # position below n, so the first position >= n is still found where it really is.
    positions = np.cumsum(np.minimum(gaps, np.uint64(n)))
    if positions[-1] >= n:
        i = int(np.argmax(positions >= n))
        index = (int(positions[i - 1]) if i else 0) + int(gaps[i])
        raise DecodeError(f"topk index {index} out of range for length {n}")
    return positions.astype(np.int64)


register("topk", TopKCompression, aliases=("TopKProtocol",))
