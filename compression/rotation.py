"""Random rotation + low-bit stochastic quantization (as in Suresh et al. 2017, DRIVE, EDEN).

A public random rotation (random signs, then the orthonormal Walsh-Hadamard transform) spreads a
vector's mass evenly over its coordinates, so one scale per vector (the largest rotated entry) fits
every coordinate and a few bits per entry suffice even when the input has outliers. The rotation is
linear and its seed public, so under secure aggregation the clients' rotated vectors (`table`) add up
under the masks and the server unrotates only their sum (`from_table`).
"""

from __future__ import annotations

import functools
import math
import numbers
import struct

import numpy as np

from .base import (Codec, DecodeError, check_length, check_payload_length, check_seed, check_vector, input_seed,
                   read_header)
from .packing import check_encodable_length, check_total, pack_codes, packed_size, unpack_codes
from .registry import register

__all__ = ["RandomRotation", "RotationCodec", "padded_length"]

VERSION = 1
_HEADER = struct.Struct("<BIBQf")  # version, n, bits, seed, scale
MIN_BITS, MAX_BITS = 2, 16
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def padded_length(n: int) -> int:
    """d: the next power of two >= n (0 for an empty vector)."""
    return 0 if n == 0 else 1 << (int(n) - 1).bit_length()


def fwht(x: np.ndarray) -> np.ndarray:
    """The unnormalized Walsh-Hadamard transform (Sylvester order) of a float64 array whose length is a
    power of two: log2(d) butterfly passes over (blocks, 2, h) views, ping-ponging two buffers."""
    src, dst = np.array(x, dtype=np.float64), np.empty(x.size, dtype=np.float64)
    h = 1
    while h < src.size:
        a, b = src.reshape(-1, 2, h), dst.reshape(-1, 2, h)
        np.add(a[:, 0], a[:, 1], out=b[:, 0])
        np.subtract(a[:, 0], a[:, 1], out=b[:, 1])
        src, dst, h = dst, src, 2 * h
    return src


class RandomRotation:
    """y = H D pad(x) / sqrt(d): D the diagonal of +-1 signs drawn as 1 - 2 * rng.integers(0, 2, d) with
    rng = np.random.default_rng(seed), H the d x d Hadamard matrix. Orthonormal, so unrotate is its transpose."""

    def __init__(self, length: int, seed: int):
        self.length, self.padded = check_length(length), padded_length(length)
        self.signs = 1.0 - 2.0 * np.random.default_rng(seed).integers(0, 2, self.padded)
        self._norm = 1.0 / np.sqrt(self.padded) if self.padded else 1.0

    def rotate(self, x: np.ndarray) -> np.ndarray:
        """float64 array of `padded`: the rotation of x (length `length`) padded with zeros."""
        x = np.asarray(x)
        if x.shape != (self.length,):
            raise ValueError(f"expected a vector of length {self.length}, got shape {x.shape}")
        padded = np.zeros(self.padded, dtype=np.float64)
        np.multiply(x, self.signs[: self.length], out=padded[: self.length])
        y = fwht(padded)
        y *= self._norm
        return y

    def unrotate(self, y: np.ndarray) -> np.ndarray:
        """float64 array of `length`: the exact inverse, signs * H y / sqrt(d), truncated."""
        y = np.asarray(y)
        if y.shape != (self.padded,):
            raise ValueError(f"expected a rotated vector of length {self.padded}, got shape {y.shape}")
        x = fwht(y)[: self.length]
        x *= self.signs[: self.length]
        x *= self._norm
        return x


@functools.lru_cache(maxsize=4)
def _rotation(length: int, seed: int) -> RandomRotation:
    """Every message of a round shares one rotation (d float64 signs each): cached."""
    return RandomRotation(length, seed)


class RotationCodec(Codec):
    """Rotate (`RandomRotation(n, seed)`, d = next power of two >= n), then round each rotated entry y_i
    stochastically to one of 2L + 1 levels of the scale s = max |y_i|, L = 2**(bits - 1) - 1:
    c_i = floor(y_i / s * L + u), u ~ U[0, 1), so E[decoded] = v (unbiased), and the error per rotated
    entry is below s / L. Decode: unrotate(s * c / L), saturated to float32's range.

    s is max |y_i| rounded up to float32 (0 for the zero vector); beyond float32's range it is capped
    and the rotated entries are clipped to it (only for inputs near float32's largest values).
    `ratio` is accepted and ignored: the size is set by `bits`.

    Options:
      bits: 2..16 (default 8) per rotated entry.
      seed: 0 (default), an int below 2**64: the PUBLIC rotation seed (every client and the server use the
            same, so rotated vectors add up); the rounding noise is drawn from (seed, the input's CRC-32 and
            length: `input_seed`).
      clip: 0.02 (default): under secure aggregation, where one public scale serves every client, rotated
            entries are clipped to [-clip, clip] and rounded to `bits` in the field (fl.rounds.layout).

    Masked rounds use `table(v)` (the float32 rotated vector, `table_size(n)` = d entries) and
    `from_table(sum, n)`; both are linear.

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        uint8   bits (2..16)
        uint64  rotation seed
        float32 scale s (finite, >= 0, not -0.0)
        d codes of `bits` bits, bit-packed in little bit order (`compression.packing`):
        code = c_i + L, 0..2L (all L when s = 0)

    Size: 18 + ceil(d * bits / 8) bytes, d = next power of two >= n (0 for n = 0).
    """

    name = "rotation"
    biased = False
    uses_ratio = False
    linear = True  # rotated vectors add up: the rotation commutes with pairwise masking

    def __init__(self, ratio: float = 0.5, bits: int = 8, seed: int = 0, clip: float = 0.02):
        super().__init__(ratio)
        if isinstance(clip, bool) or not isinstance(clip, numbers.Real) or not math.isfinite(clip) or clip <= 0:
            raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
        self.clip = float(clip)  # under masking: the public clip of a rotated entry (one scale for all clients)
        if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not MIN_BITS <= bits <= MAX_BITS:
            raise ValueError(f"bits must be an integer in [{MIN_BITS}, {MAX_BITS}], got {bits!r}")
        seed = check_seed(seed)
        if seed is None or seed >= 2**64:
            raise ValueError(f"rotation needs a fixed public seed, an integer in [0, 2**64), got {seed!r}")
        self.bits, self.seed = int(bits), seed

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        n, levels = vector.size, (1 << (self.bits - 1)) - 1
        check_encodable_length(n, "rotation")
        y = _rotation(n, self.seed).rotate(vector)
        top = float(np.abs(y).max()) if n else 0.0
        scale = np.float32(min(top, _FLOAT32_MAX))
        if float(scale) < top and float(scale) < _FLOAT32_MAX:  # round up, so |y| / s <= 1
            scale = np.nextafter(scale, np.float32(np.inf))
        codes = np.full(y.size, levels, dtype=np.uint32)
        if scale > 0:
            y *= levels / np.float64(scale)
            y += np.random.default_rng(input_seed(self.seed, vector)).random(y.size)
            np.floor(y, out=y)
            np.clip(y, -levels, levels, out=y)
            codes = (y + levels).astype(np.uint32)
        return _HEADER.pack(VERSION, n, self.bits, self.seed, scale) + pack_codes(codes, self.bits)

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        length = check_length(length)
        _, n, bits, seed, scale = read_header("rotation", payload, _HEADER, VERSION)
        check_payload_length("rotation", n, length)
        if not MIN_BITS <= bits <= MAX_BITS:
            raise DecodeError(f"rotation bits {bits} out of range [{MIN_BITS}, {MAX_BITS}]")
        if not np.isfinite(scale) or np.signbit(scale):
            raise DecodeError(f"rotation scale must be finite and >= 0, got {scale}")
        d, levels = padded_length(n), (1 << (bits - 1)) - 1
        check_total("rotation", len(payload), _HEADER.size + packed_size(d, bits))
        codes = unpack_codes(np.frombuffer(payload, dtype=np.uint8, offset=_HEADER.size), d, bits, "rotation codes")
        if d and int(codes.max()) > 2 * levels:
            raise DecodeError(f"rotation code {int(codes.max())} above 2L = {2 * levels} for {bits} bits")
        if scale == 0 and (codes != levels).any():
            raise DecodeError("rotation codes must all be L (zero) when the scale is 0")
        if not n:
            return np.zeros(0, dtype=np.float32)
        y = (codes.astype(np.float64) - levels) * (np.float64(scale) / levels)
        x = _rotation(n, seed).unrotate(y)
        return np.clip(x, -_FLOAT32_MAX, _FLOAT32_MAX).astype(np.float32)

    def size(self, n: int, k: int | None = None) -> int:
        return _HEADER.size + packed_size(padded_length(n), self.bits)

    def check_sender(self, payload: bytes, length: int) -> None:
        """The payload names its own seed and width, and decoding builds the seed's rotation (its d signs; a
        few are cached): the server accepts only its own."""
        _, n, bits, seed, _ = read_header("rotation", payload, _HEADER, VERSION)
        check_payload_length("rotation", n, length)
        if (bits, seed) != (self.bits, self.seed):
            raise DecodeError(f"rotation payload of another rotation: (bits, seed) = {(bits, seed)}, this codec's "
                              f"{(self.bits, self.seed)}")

    # --- masked rounds: the round code quantizes the (summed) table into the secagg field itself --------

    def table_size(self, n: int) -> int:
        """Cells of the table of a vector of length n: d."""
        return padded_length(n)

    def masked_table(self, vector: np.ndarray) -> np.ndarray:
        """What a client masks under secure aggregation: its (weighted) update rotated, quantized by the round
        code to `bits` in the field with the public `clip`."""
        return self.table(vector)

    def table(self, vector: np.ndarray) -> np.ndarray:
        """float32 rotated vector (d cells); ValueError if a cell overflows float32."""
        vector = check_vector(vector)
        with np.errstate(over="ignore"):
            table = _rotation(vector.size, self.seed).rotate(vector).astype(np.float32)
        if not np.isfinite(table).all():
            raise ValueError("rotation: a table cell overflows float32 (the input is too large)")
        return table

    def from_table(self, table: np.ndarray, length: int) -> np.ndarray:
        """float32 vector of `length` from a (summed or averaged) table of this codec's seed."""
        table = np.asarray(table, dtype=np.float64)
        if not np.isfinite(table).all():
            raise ValueError("rotation table contains NaN or Inf")
        with np.errstate(over="ignore"):
            vector = _rotation(check_length(length), self.seed).unrotate(table).astype(np.float32)
        if not np.isfinite(vector).all():
            raise ValueError("rotation: the unrotated table overflows float32")
        return vector

    def __repr__(self) -> str:
        return f"RotationCodec(bits={self.bits}, seed={self.seed}, clip={self.clip})"


register("rotation", RotationCodec)
