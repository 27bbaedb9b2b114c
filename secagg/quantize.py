"""Fixed-point quantization of real vectors into the field Z_{2^b}, b <= 32 (held as numpy uint32, which wraps
mod 2^32; 2^b divides 2^32, so reducing mod 2^b at the end gives the sum mod 2^b).

Masks live in the field, so real updates must become field elements whose sum can be read back: clip to
[-clip, clip], scale so that |q| <= B, round stochastically (unbiased), store as two's complement. B is
2^(quant_bits-1) - 1 (each client's value takes quant_bits signed bits), or without quant_bits the largest
B with max_clients * B <= 2^(b-1) - 1. Either way the sum of up to max_clients values lies in
[-(2^(b-1) - 1), 2^(b-1) - 1], so the server's signed lift of the field sum is exact: overflow is refused
at construction, never possible in a round.
"""

from __future__ import annotations

import math

import numpy as np

_MIN_LEVELS = 2**8  # fewer positive levels than this quantizes too coarsely to be useful (without quant_bits)
MAX_FIELD_BITS = 32


def smallest_safe_bits(quant_bits: int, max_clients: int) -> int:
    """The narrowest field Z_{2^b} in which the sum of max_clients values of quant_bits signed bits cannot wrap:
    the least b with max_clients * (2^(quant_bits-1) - 1) <= 2^(b-1) - 1 (at most quant_bits + ceil(log2
    max_clients))."""
    if isinstance(quant_bits, bool) or int(quant_bits) != quant_bits or quant_bits < 2:
        raise ValueError(f"quant_bits must be an integer >= 2 (one sign bit and one of value), got {quant_bits!r}")
    if isinstance(max_clients, bool) or int(max_clients) != max_clients or max_clients < 1:
        raise ValueError(f"max_clients must be an integer >= 1, got {max_clients!r}")
    total = int(max_clients) * (2 ** (int(quant_bits) - 1) - 1)
    return max(int(quant_bits), total.bit_length() + 1)


class FixedPointQuantizer:
    """Maps floats in [-clip, clip] to integers in [-B, B], held as uint32 two's complement; sums are read
    back in Z_{2^bits}."""

    def __init__(self, clip: float, max_clients: int, bits: int = MAX_FIELD_BITS,
                 quant_bits: int | None = None) -> None:
        clip = float(clip)
        if not math.isfinite(clip) or clip <= 0:
            raise ValueError(f"clip must be a finite positive number, got {clip!r}")
        if isinstance(max_clients, bool) or int(max_clients) != max_clients or max_clients < 1:
            raise ValueError(f"max_clients must be an integer >= 1, got {max_clients!r}")
        max_clients = int(max_clients)
        if isinstance(bits, bool) or int(bits) != bits or not 2 <= bits <= MAX_FIELD_BITS:
            raise ValueError(f"field bits must be an integer in [2, {MAX_FIELD_BITS}], got {bits!r}")
        bits = int(bits)
        if quant_bits is None:
            bound = (2 ** (bits - 1) - 1) // max_clients
            if bound < _MIN_LEVELS:
                raise ValueError(
                    f"max_clients={max_clients} leaves only B={bound} levels per sign in a {bits}-bit field "
                    f"(need >= {_MIN_LEVELS}); lower max_clients or widen the field")
        else:
            if isinstance(quant_bits, bool) or int(quant_bits) != quant_bits or not 2 <= quant_bits <= MAX_FIELD_BITS:
                raise ValueError(f"quant_bits must be an integer in [2, {MAX_FIELD_BITS}], got {quant_bits!r}")
            safe = smallest_safe_bits(int(quant_bits), max_clients)
            if bits < safe:
                raise ValueError(
                    f"a {bits}-bit field can wrap: the sum of {max_clients} values of {int(quant_bits)} bits needs "
                    f"at least {safe} bits (the smallest safe field)")
            bound = 2 ** (int(quant_bits) - 1) - 1
        if not math.isfinite(bound / clip):  # an infinite scale quantizes every value to +-B or garbage (0 * inf)
            raise ValueError(f"clip {clip!r} is too small: its scale B / clip = {bound} / {clip!r} overflows")
        self.clip = clip
        self.max_clients = max_clients
        self.bits, self.quant_bits = bits, quant_bits
        self._low = np.uint32((1 << bits) - 1) if bits < 32 else None
        self.bound = bound  # B: every quantized value lies in [-B, B]
        self.scale = bound / clip

    @property
    def step(self) -> float:
        """The real value of one quantization level; rounding error per coordinate is below this."""
        return 1.0 / self.scale

    def quantize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clip, scale and stochastically round `x`; returns uint32 two's-complement field elements.

        Stochastic rounding (floor, then +1 with probability equal to the fraction) keeps the
        quantized value unbiased, so rounding error averages out across clients and rounds.
        """
        x = np.asarray(x, dtype=np.float64)
        if not np.isfinite(x).all():
            raise ValueError("cannot quantize NaN or Inf")
        scaled = np.clip(x, -self.clip, self.clip) * self.scale
        low = np.floor(scaled)
        q = low + (rng.random(scaled.shape) < (scaled - low))
        # clip * scale may land one ulp above B; the clip keeps the overflow guarantee exact.
        q = np.clip(q, -self.bound, self.bound).astype(np.int32)
        return q.view(np.uint32)

    def lift(self, x: np.ndarray) -> np.ndarray:
        """Field elements (a single vector or a sum of up to max_clients, any representative mod 2^bits) as the
        signed integers they stand for (int64, exact): the representative in [-2^(bits-1), 2^(bits-1) - 1]. A valid
        sum lies within +-(2^(bits-1) - 1), so the lowest residue stands for nothing the clients sent."""
        x = np.asarray(x)
        if x.dtype != np.uint32:
            raise ValueError(f"dequantize expects uint32 field elements, got {x.dtype}")
        if self._low is None:
            return x.view(np.int32).astype(np.int64)
        low = (x & self._low).astype(np.int64)
        low[low >= 1 << (self.bits - 1)] -= 1 << self.bits
        return low

    def dequantize(self, x: np.ndarray) -> np.ndarray:
        """The real values of field elements: lifted to signed and unscaled."""
        return self.lift(x).astype(np.float64) / self.scale

    def quantize_with_error(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Quantize and also return what the server will see for `x`, so clipping and rounding
        error (x - sent_values) can go into the caller's error-feedback residual."""
        q = self.quantize(x, rng)
        return q, self.dequantize(q).astype(np.float32)

    def __repr__(self) -> str:
        return (f"FixedPointQuantizer(clip={self.clip!r}, max_clients={self.max_clients!r}, bits={self.bits!r}, "
                f"quant_bits={self.quant_bits!r})")
