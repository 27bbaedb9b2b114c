"""Fixed-point quantization of real vectors into the field Z_{2^32} (numpy uint32, which wraps for free).

Masks live in Z_{2^32}, so real updates must become field elements whose sum can be read back:
clip to [-clip, clip], scale so that |q| <= B, round stochastically (unbiased), store as two's complement.
With B = (2^31 - 1) // max_clients, the sum of up to max_clients values lies in [-(2^31 - 1), 2^31 - 1],
so the server's signed lift of the field sum is exact: overflow is impossible by construction.
"""

from __future__ import annotations

import math

import numpy as np

_MIN_LEVELS = 2**8  # fewer positive levels than this quantizes too coarsely to be useful


class FixedPointQuantizer:
    """Maps floats in [-clip, clip] to integers in [-B, B], held as uint32 in Z_{2^32}."""

    def __init__(self, clip: float, max_clients: int) -> None:
        clip = float(clip)
        if not math.isfinite(clip) or clip <= 0:
            raise ValueError(f"clip must be a finite positive number, got {clip!r}")
        if int(max_clients) != max_clients or max_clients < 1:
            raise ValueError(f"max_clients must be an integer >= 1, got {max_clients!r}")
        max_clients = int(max_clients)
        bound = (2**31 - 1) // max_clients
        if bound < _MIN_LEVELS:
            raise ValueError(
                f"max_clients={max_clients} leaves only B={bound} levels per sign (need >= {_MIN_LEVELS}); "
                "lower max_clients"
            )
        self.clip = clip
        self.max_clients = max_clients
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

    def dequantize(self, x: np.ndarray) -> np.ndarray:
        """Lift field elements (a single vector or a sum of up to max_clients) to signed and unscale."""
        x = np.asarray(x)
        if x.dtype != np.uint32:
            raise ValueError(f"dequantize expects uint32 field elements, got {x.dtype}")
        return x.view(np.int32).astype(np.float64) / self.scale

    def quantize_with_error(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Quantize and also return what the server will see for `x`, so clipping and rounding
        error (x - sent_values) can go into the caller's error-feedback residual."""
        q = self.quantize(x, rng)
        return q, self.dequantize(q).astype(np.float32)

    def __repr__(self) -> str:
        return f"FixedPointQuantizer(clip={self.clip!r}, max_clients={self.max_clients!r})"
