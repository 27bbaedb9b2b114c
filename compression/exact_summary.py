"""Exact summaries, the bounds of the `fresh` index policy: dense masked uploads in the first exchange that save
nothing; they measure how far a cheap summary is from the shared set it approximates, and how far a shared set
is from per-client top-k.

- `exact`: the signed weighted update itself. Summed, the cohort's update, of which the server takes the
  exact top k: the shared set that carries most of this round's sum. The server learns the sum, as dense
  secure aggregation reveals it.
- `energy`: each entry's square. Summed, the cohort's energy per entry, of which the server takes the top k:
  the set `marginals` estimates. With error feedback it also clears the clients' largest residuals where
  their updates cancel in the sum, and on shards it trains better than `exact` (results/fmnist/fedavgm). The
  server learns the cohort's sum of squares per entry, which secure aggregation of the update does not reveal.
"""
from __future__ import annotations

import numpy as np

from .base import check_vector
from .selection import topk_positions

__all__ = ["EnergySummary", "ExactSummary"]


class ExactSummary:
    """The vector as its own (1, length) table, with CountSketch's interface; linear, so it masks exactly."""

    rows = 1
    linear = True  # in the vector (see CountSketch.linear)

    def __init__(self, length: int):
        if int(length) != length or length < 1:
            raise ValueError(f"length must be a positive integer, got {length!r}")
        self.length = self.cols = int(length)

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        vector = check_vector(vector)
        if vector.size != self.length:
            raise ValueError(f"expected a vector of length {self.length}, got {vector.size}")
        return np.asarray(vector, np.float32).reshape(1, self.length)

    def heavy_hitters(self, table: np.ndarray, k: int) -> np.ndarray:
        """Sorted int64 positions of the k largest |entries| of the (summed) table; ties to the lower position."""
        table = np.asarray(table).reshape(-1)
        if table.size != self.length:
            raise ValueError(f"expected {self.length} cells, got {table.size}")
        return topk_positions(table, k)  # refuses NaN and Inf

    def __repr__(self) -> str:
        return f"ExactSummary(length={self.length})"


class EnergySummary(ExactSummary):
    """Each entry's square as the (1, length) table: summed over the cohort (linear in the tables, so it masks
    exactly), each entry's energy, whose top k is `marginals`' target."""

    linear = False  # squares: no difference of two sums of them is a client's values

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # a square beyond float32 becomes inf, which quantizing refuses
            return np.square(super().sketch(vector))

    def __repr__(self) -> str:
        return f"EnergySummary(length={self.length})"
