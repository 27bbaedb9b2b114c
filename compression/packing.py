"""Byte-level helpers shared by the codecs: bit-packed codes, layer layouts, strict size checks.

Bit streams here are in little bit order, like `np.packbits(..., bitorder="little")`: bit t of a
stream is bit t % 8 of byte t // 8, and a `width`-bit code i occupies stream bits
[i * width, (i + 1) * width), low bit first. Unused bits of the last byte are zero, and decoding
checks that they are.
"""

from __future__ import annotations

import numbers
import struct

import numpy as np

from .base import DecodeError

__all__ = [
    "pack_codes",
    "unpack_codes",
    "packed_size",
    "check_layout",
    "layer_sizes",
    "pack_layout",
    "layout_size",
    "read_layout",
    "check_total",
    "check_encodable_length",
    "MAX_LENGTH",
]

MAX_LENGTH = 2**32 - 1  # lengths travel as uint32
_SMALL = 512  # up to this many codes, the bit-matrix path is faster (fewer numpy calls)
_WIDE = 8192  # from this many 9-31-bit codes, groups of eight beat the bit matrix (experiments.bench_packing)
_CHUNK_GROUPS = 1 << 16  # groups of eight 9-31-bit codes packed or unpacked at once
_WEIGHTS = {width: (1 << np.arange(width)).astype(np.uint8) for width in range(1, 8)}
_U32 = struct.Struct("<I")


def packed_size(count: int, width: int) -> int:
    """Bytes of `count` codes of `width` bits: ceil(count * width / 8)."""
    return (count * width + 7) // 8


def pack_codes(codes: np.ndarray, width: int) -> bytes:
    """`codes` (non-negative integers below 2**width, 1 <= width <= 32) as a packed bit stream.

    Few codes go through a (count, width) bit matrix (np.unpackbits / np.packbits: few calls); many narrow
    codes are packed eight to a uint64 word, keeping its low `width` bytes, and many wide ones eight to a group
    of `width` bytes (_pack_wide): no per-bit array (docs/performance.md has the measurements).
    """
    codes = np.asarray(codes)
    count = codes.size
    if width == 1:
        return np.packbits(codes.astype(bool, copy=False), bitorder="little").tobytes()
    if width == 8:
        return codes.astype(np.uint8).tobytes()
    if width < 8 and count > _SMALL:
        groups = -(-count // 8)
        padded = np.zeros(groups * 8, dtype=np.uint64)
        padded[:count] = codes
        lanes = padded.reshape(groups, 8)
        word = lanes[:, 0].copy()
        for j in range(1, 8):
            word |= lanes[:, j] << np.uint64(width * j)
        stream = word.astype("<u8").view(np.uint8).reshape(groups, 8)[:, :width]
        return stream.tobytes()[: packed_size(count, width)]
    if width == 32:
        return codes.astype("<u4", copy=False).tobytes()
    if width > 8 and count >= _WIDE:
        return _pack_wide(codes, width)
    return _pack_matrix(codes, width)


def _pack_matrix(codes: np.ndarray, width: int) -> bytes:
    """Through a (count, width) bit matrix: few numpy calls, but a byte per bit of every code held at once (the
    baseline of experiments.bench_packing; its memory in docs/performance.md, Bit packing of the masked vector)."""
    lanes = 1 if width <= 8 else 4
    raw = codes.astype(np.uint8 if lanes == 1 else "<u4", copy=False).view(np.uint8).reshape(codes.size, lanes)
    return np.packbits(np.unpackbits(raw, axis=1, bitorder="little")[:, :width], bitorder="little").tobytes()


def _pack_wide(codes: np.ndarray, width: int) -> bytes:
    """Codes of 9-31 bits, eight to a group of `width` bytes (code j of a group starts at its bit j * width), a
    chunk of groups at a time so that its rows stay in cache: no bit matrix, so a few bytes of memory a code where
    np.unpackbits' path holds a byte per bit (docs/performance.md, Bit packing of the masked vector)."""
    step = 8 * _CHUNK_GROUPS
    return b"".join(_pack_groups(codes[i:i + step], width) for i in range(0, codes.size, step))


def _pack_groups(codes: np.ndarray, width: int) -> bytes:
    count = codes.size
    groups = -(-count // 8)
    lanes = np.zeros(groups * 8, dtype=np.uint64)
    lanes[:count] = codes
    lanes = lanes.reshape(groups, 8).T.copy()  # code j of every group, contiguous
    rows = np.zeros((width, groups), dtype=np.uint8)  # byte b of every group, contiguous
    for j in range(8):
        offset, shift = divmod(j * width, 8)
        word = lanes[j] << np.uint64(shift)
        for b in range((shift + width + 7) // 8):  # at most 5 bytes; the last code ends at the group's last byte
            rows[offset + b] |= (word >> np.uint64(8 * b)).astype(np.uint8)
    return rows.T.tobytes()[: packed_size(count, width)]


def unpack_codes(data: np.ndarray, count: int, width: int, what: str) -> np.ndarray:
    """`count` codes of `width` bits from the uint8 array `data` (exactly packed_size bytes long).

    Returns uint32 codes (uint8 for width <= 8). DecodeError if padding bits are set.
    """
    size = packed_size(count, width)
    if data.size != size:  # callers slice exactly; this guards the helper itself
        raise DecodeError(f"{what}: expected {size} bytes of {width}-bit codes, got {data.size}")
    used = count * width % 8
    if used and data[-1] >> used:
        raise DecodeError(f"{what}: padding bits set after the last {width}-bit code")
    if width == 1:
        return np.unpackbits(data, count=count, bitorder="little")
    if width == 8:
        return data.copy()
    if width < 8 and count <= 8 * _SMALL:  # bits times their weights: one matrix-vector product
        bits = np.unpackbits(data, count=count * width, bitorder="little").reshape(count, width)
        return bits @ _WEIGHTS[width]
    if width < 8:
        groups = -(-count // 8)
        flat = np.zeros(groups * width, dtype=np.uint8)
        flat[:size] = data
        lanes = np.zeros((groups, 8), dtype=np.uint8)
        lanes[:, :width] = flat.reshape(groups, width)
        word = lanes.view("<u8").reshape(groups)
        out = np.empty((groups, 8), dtype=np.uint8)
        mask = np.uint64((1 << width) - 1)
        for j in range(8):
            out[:, j] = (word >> np.uint64(width * j)) & mask
        return out.reshape(-1)[:count]
    if width == 32:
        return data.view("<u4").astype(np.uint32)
    if count >= _WIDE:
        return _unpack_wide(data, count, width)
    return _unpack_matrix(data, count, width)


def _unpack_matrix(data: np.ndarray, count: int, width: int) -> np.ndarray:
    """_pack_matrix's inverse for 9-31-bit codes."""
    bits = np.unpackbits(data, count=count * width, bitorder="little").reshape(count, width)
    padded = np.zeros((count, 32), dtype=np.uint8)
    padded[:, :width] = bits
    return np.packbits(padded, axis=1, bitorder="little").view("<u4").reshape(count).astype(np.uint32)


def _unpack_wide(data: np.ndarray, count: int, width: int) -> np.ndarray:
    """_pack_wide's inverse, a chunk of groups at a time."""
    step = 8 * _CHUNK_GROUPS
    parts = [_unpack_groups(data[i // 8 * width:(i // 8 + _CHUNK_GROUPS) * width], min(step, count - i), width)
             for i in range(0, count, step)]
    return np.concatenate(parts)


def _unpack_groups(data: np.ndarray, count: int, width: int) -> np.ndarray:
    groups = -(-count // 8)
    flat = np.zeros(groups * width, dtype=np.uint8)
    flat[:data.size] = data
    rows = flat.reshape(groups, width).T.copy()  # byte b of every group, contiguous
    out = np.empty((8, groups), dtype=np.uint32)
    mask = np.uint64((1 << width) - 1)
    for j in range(8):
        offset, shift = divmod(j * width, 8)
        word = rows[offset].astype(np.uint64)
        for b in range(1, (shift + width + 7) // 8):
            word |= rows[offset + b].astype(np.uint64) << np.uint64(8 * b)
        out[j] = (word >> np.uint64(shift)) & mask
    return out.T.reshape(-1)[:count]


# --- layer layouts ------------------------------------------------------------------------------

def check_layout(layout) -> tuple[int, ...] | None:
    """A codec's `layout` option (layer sizes, in order) as a tuple of positive ints, or None."""
    if layout is None:
        return None
    if isinstance(layout, (str, bytes)) or not hasattr(layout, "__iter__"):
        raise TypeError(f"layout must be a sequence of layer sizes, got {layout!r}")
    sizes = []
    for size in layout:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise ValueError(f"layout sizes must be positive integers, got {size!r}")
        sizes.append(int(size))
    if not sizes:
        raise ValueError("layout must name at least one layer")
    if sum(sizes) > MAX_LENGTH:
        raise ValueError(f"layout sums to {sum(sizes)}, more than a payload can hold ({MAX_LENGTH})")
    return tuple(sizes)


def layer_sizes(layout: tuple[int, ...] | None, n: int) -> np.ndarray:
    """int64 layer sizes for a vector of length n: the layout, or one layer of n (ValueError if they disagree)."""
    if layout is None:
        return np.array([n], dtype=np.int64)
    if sum(layout) != n:
        raise ValueError(f"layout sums to {sum(layout)} but the vector has length {n}")
    return np.array(layout, dtype=np.int64)


def layout_size(layout: tuple[int, ...] | None) -> int:
    """Bytes `pack_layout` writes: 4 + 4 * L (L = 0 without a layout)."""
    return 4 + 4 * (0 if layout is None else len(layout))


def pack_layout(layout: tuple[int, ...] | None) -> bytes:
    """uint32 L, then L uint32 layer sizes; L = 0 means one layer holding the whole vector."""
    if layout is None:
        return _U32.pack(0)
    return _U32.pack(len(layout)) + np.asarray(layout, dtype="<u4").tobytes()


def read_layout(payload: bytes, offset: int, n: int, what: str) -> tuple[np.ndarray, int, int]:
    """(int64 layer sizes, L as written, offset after the layout), strictly checked against n."""
    if len(payload) < offset + 4:
        raise DecodeError(f"{what} payload truncated: no layer count at byte {offset}")
    (count,) = _U32.unpack_from(payload, offset)
    offset += 4
    if count == 0:
        return np.array([n], dtype=np.int64), 0, offset
    if count > n:
        raise DecodeError(f"{what} layout has {count} layers, more than the length {n}")
    if len(payload) < offset + 4 * count:
        raise DecodeError(f"{what} payload truncated: layout of {count} layers needs {4 * count} bytes")
    sizes = np.frombuffer(payload, dtype="<u4", count=count, offset=offset).astype(np.int64)
    if (sizes == 0).any():
        raise DecodeError(f"{what} layout has an empty layer")
    if int(sizes.sum()) != n:
        raise DecodeError(f"{what} layout sums to {int(sizes.sum())}, expected length {n}")
    return sizes, count, offset + 4 * count


# --- checks -------------------------------------------------------------------------------------

def check_total(what: str, actual: int, expected: int) -> None:
    """DecodeError unless a payload of `actual` bytes is exactly the `expected` size."""
    if actual < expected:
        raise DecodeError(f"{what} payload truncated: expected {expected} bytes, got {actual}")
    if actual > expected:
        raise DecodeError(f"{what} payload has trailing bytes: expected {expected} bytes, got {actual}")


def check_encodable_length(n: int, what: str, allow_empty: bool = True) -> None:
    """ValueError for a vector the payload cannot describe (empty where not allowed, or n >= 2**32)."""
    if n == 0 and not allow_empty:
        raise ValueError(f"{what} cannot encode an empty vector")
    if n > MAX_LENGTH:
        raise ValueError(f"{what} payloads hold lengths below 2**32, got {n}")
