"""The exact summary: the signed weighted update itself, the bound of the `fresh` index policy.

Masked and summed, it gives the server the cohort's summed update, of which it takes the exact top k: the
best shared index set there is. It costs a dense masked upload in the first exchange (so it saves nothing;
it is there to measure how far a cheap summary is from the best shared set, and how far any shared set
is from per-client top-k), and the server learns what dense secure aggregation reveals: the sum.
"""
from __future__ import annotations

import numpy as np

from .base import check_vector
from .selection import topk_positions

__all__ = ["ExactSummary"]


class ExactSummary:
    """The vector as its own (1, length) table, with CountSketch's interface; linear, so it masks exactly."""

    rows = 1

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
