"""Top-k sparsification: send the k largest-magnitude entries, their positions and values."""

from __future__ import annotations

import struct

import numpy as np

from .base import Codec, DecodeError, check_length, check_payload_length, check_seed, check_vector, read_header
from .packing import check_encodable_length, check_layout, check_total, layer_sizes
from .positions import (
    BITMAP,
    ENCODING_NAMES,
    RICE,
    UINT16,
    VARINT,
    check_positions,
    decode_positions,
    encode_positions,
    pack_positions,
    position_sizes,
    unpack_positions,
)
from .registry import register
from .selection import layered_count, select_topk, topk_count, topk_positions

__all__ = [
    "TopKCompression",
    "topk_positions",
    "topk_count",
    "encode_positions",
    "decode_positions",
    "position_sizes",
    "BITMAP",
    "VARINT",
    "UINT16",
    "RICE",
]

VERSION = 2  # 2: four position encodings (the byte after the version); any other version is refused
_HEADER = struct.Struct("<BBII")  # version, position encoding, n, k


class TopKCompression(Codec):
    """Keep the k largest-magnitude entries (see `selection.topk_count`: k = ceil(ratio * n)); zero the rest.

    Options:
      threshold: 'sampled' (default: bracket the k-th largest magnitude from a random sample of about
                 16*sqrt(n) magnitudes, then partition only the entries in the bracket; falls back to
                 a full partition when the bracket misses, holds more than half the entries, or n < 4096)
                 or 'exact' (np.partition over all magnitudes). Both find the same exact threshold, so
                 both keep exactly k entries, the same ones, and give byte-identical payloads (tested);
                 which is faster depends on the host's partition (docs/performance.md, Codec speed), and
                 'exact' is the plain reference.
      layout:    None (global selection) or the layer sizes, in order (summing to n): then each
                 layer keeps ceil(ratio * size) of its own entries (per-layer selection).
      seed:      seed of the sampled threshold's sample (affects speed only, never the result).

    Payload (format version 2), all little-endian:
        uint8   format version (2)
        uint8   position encoding: 0 bitmap, 1 delta-varint, 2 uint16 block offsets, 3 Golomb-Rice
        uint32  n, the vector's length
        uint32  k, the number of kept entries (1 <= k <= n)
        positions, in that encoding (layouts in `compression.positions`)
        k float32 values, in increasing position order

    Size: 10 + P + 4k bytes, P = min(bitmap, varint, uint16, rice) for these positions:
        bitmap ceil(n/8); varint sum(varint_len(gap_i)); uint16 sum(varint_len(count_b)) + 2k;
        rice 1 + ceil(k*b/8) + ceil((sum(d_i >> b) + k)/8)  (definitions in `compression.positions`).
    The decoder needs neither the ratio nor the layout: positions are global.
    """

    name = "topk"
    biased = True

    def __init__(self, ratio: float = 0.5, threshold: str = "sampled", layout=None, seed: int = 0):
        super().__init__(ratio)
        if threshold not in ("exact", "sampled"):
            raise ValueError(f"threshold must be 'exact' or 'sampled', got {threshold!r}")
        if check_seed(seed) is None:
            raise ValueError("topk seed must be a non-negative integer (it only picks the sample)")
        self.threshold, self.layout, self.seed = threshold, check_layout(layout), int(seed)

    def k_for(self, n: int) -> int:
        """How many entries a vector of length `n` keeps at this ratio (and layout)."""
        return layered_count(n, self.ratio, self.layout)

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector, finite=False)  # select_topk checks the magnitudes
        n = vector.size
        check_encodable_length(n, "topk", allow_empty=False)
        layout = None if self.layout is None else layer_sizes(self.layout, n)
        sampled_seed = self.seed if self.threshold == "sampled" else None
        positions, mask = select_topk(vector, self.ratio, layout, sampled_seed)
        return self._pack(vector, positions, mask)

    def encode_at(self, vector: np.ndarray, positions: np.ndarray) -> bytes:
        """The payload that sends `vector` at the given sorted, distinct `positions` (1 to n of them)."""
        vector = check_vector(vector)
        return self._pack(vector, check_positions(positions, vector.size))

    def _pack(self, vector: np.ndarray, positions: np.ndarray, mask: np.ndarray | None = None) -> bytes:
        """The payload for checked input: a finite float32 vector and valid int64 positions."""
        encoding, position_bytes = pack_positions(positions, vector.size, mask)
        values = vector.take(positions).astype("<f4", copy=False).tobytes()
        return b"".join((_HEADER.pack(VERSION, encoding, vector.size, positions.size), position_bytes, values))

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        positions, values = self._read(payload, length)
        dense = np.zeros(length, dtype=np.float32)
        # Integer scatter (faster than np.put or boolean assignment) from aligned native floats: the values
        # sit at an odd offset in the payload, and scattering from that unaligned view is slower than copying
        # first (docs/performance.md, "Why some codec internals are the way they are").
        dense[positions] = values.astype(np.float32)
        return dense

    def decode_sparse(self, payload: bytes, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted int64 positions, float32 values) of a payload for a vector of `length`."""
        positions, values = self._read(payload, length)
        return positions, values.astype(np.float32)  # astype copies: writable, native byte order

    def _read(self, payload: bytes, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and a read-only little-endian view of the values, all checked."""
        length = check_length(length)
        encoding, n, k = _read_header(payload)
        check_payload_length("topk", n, length)
        if not 1 <= k <= n:
            raise DecodeError(f"topk k={k} out of range [1, {n}]")
        data = np.frombuffer(payload, dtype=np.uint8, offset=_HEADER.size)
        positions, position_size = unpack_positions(encoding, data, n, k)
        check_total("topk", len(payload), _HEADER.size + position_size + 4 * k)
        values = np.frombuffer(payload, dtype="<f4", count=k, offset=_HEADER.size + position_size)
        if not np.isfinite(values).all():
            raise DecodeError("topk payload contains NaN or Inf values")
        return positions, values

    def size(self, n: int, k: int | None = None) -> int:
        """An upper bound on the payload size (k defaults to this codec's k for n).

        The exact size depends on where the positions fall (see `encoded_size`); this bound is
        10 + min(ceil(n/8), 5k) + 4k, since no encoding chosen is larger than the bitmap and no
        varint is longer than 5 bytes.
        """
        k = self.k_for(n) if k is None else k
        return _HEADER.size + min((n + 7) // 8, 5 * k) + 4 * k

    def encoded_size(self, positions: np.ndarray, n: int) -> int:
        """len(encode_at(v, positions)) for any v of length n, computed without encoding."""
        positions = np.asarray(positions, dtype=np.int64)
        return _HEADER.size + min(position_sizes(positions, n).values()) + 4 * positions.size

    @staticmethod
    def position_encoding(payload: bytes) -> str:
        """'bitmap', 'varint', 'uint16' or 'rice': how this payload stores its positions."""
        encoding, _, _ = _read_header(payload)
        return ENCODING_NAMES[encoding]

    def __repr__(self) -> str:
        return (f"TopKCompression(ratio={self.ratio}, threshold={self.threshold!r}, layout="
                f"{None if self.layout is None else f'<{len(self.layout)} layers>'})")


def _read_header(payload: bytes) -> tuple[int, int, int]:
    _, encoding, n, k = read_header("topk", payload, _HEADER, VERSION)
    if encoding >= len(ENCODING_NAMES):
        raise DecodeError(f"unknown topk position encoding {encoding}")
    return encoding, n, k


register("topk", TopKCompression, aliases=("TopKProtocol",))
