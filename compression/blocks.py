"""Block energies: the summary the `fresh` index policy masks to choose a round's shared index set.

The model vector is cut into blocks of `block` consecutive entries; a client's summary is each block's sum
of squares. Summed over clients (under the masks) it tells the server where the cohort's updates are
large, so it takes the blocks of largest summed energy, whole. Neural-network updates are structured
(a unit's incoming weights move together: the gradient of a dense layer is an outer product), so a
block's energy locates heavy entries far better than a count sketch of the same size, whose cells each
mix length / cols unrelated entries. Unlike a count sketch it is not linear: the server learns the sum
of the clients' energies, not the energy of their sum (docs/secagg.md).
"""
from __future__ import annotations

import numpy as np

from .base import check_vector

__all__ = ["BlockEnergy"]


class BlockEnergy:
    """Per-block sums of squares of vectors of `length`, with CountSketch's interface (one row)."""

    rows = 1
    linear = False  # energies (see CountSketch.linear)

    def __init__(self, length: int, block: int):
        for label, value in (("length", length), ("block", block)):
            if int(value) != value or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        self.length, self.block = int(length), int(block)
        self.cols = -(-self.length // self.block)

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        """The (1, cols) float32 table: each block's sum of squares (float64 sums)."""
        vector = check_vector(vector)
        if vector.size != self.length:
            raise ValueError(f"expected a vector of length {self.length}, got {vector.size}")
        squares = np.zeros(self.cols * self.block, np.float64)
        np.square(vector, out=squares[:self.length], dtype=np.float64)
        return squares.reshape(self.cols, self.block).sum(axis=1).astype(np.float32).reshape(1, self.cols)

    def heavy_hitters(self, table: np.ndarray, k: int) -> np.ndarray:
        """Sorted int64 positions: the blocks of largest energy, whole, until there are k (the last one cut;
        ties go to the lower block)."""
        table = np.asarray(table, np.float32).reshape(-1)
        if table.size != self.cols:
            raise ValueError(f"expected {self.cols} block energies, got {table.size}")
        if not np.isfinite(table).all():
            raise ValueError("block energies contain NaN or Inf")
        if not 1 <= k <= self.length:
            raise ValueError(f"k must be in [1, {self.length}], got {k}")
        order = np.argsort(-table, kind="stable")[:-(-k // self.block) + 1]
        positions = (order[:, None] * self.block + np.arange(self.block)).ravel()
        return np.sort(positions[positions < self.length][:k]).astype(np.int64)

    def __repr__(self) -> str:
        return f"BlockEnergy(length={self.length}, block={self.block})"
