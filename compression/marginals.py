"""Row and column energies: the summary the `fresh` index policy masks to choose a round's shared index set
entry by entry, at the cost of a block summary.

Each weight tensor of shape (out, ...) is viewed as an out x rest matrix; a client's summary is the sum of
squares of each row and of each column of its weighted update there, and each entry's square as is for a 1-D
tensor (a bias) or a matrix of one row or one column (whose marginals would cost more cells than its entries).
Summed over the cohort (under the masks) the server estimates an entry's energy as row x column / matrix
total, exact when the matrix of energies has rank one: the gradient of a dense layer for one sample is an
outer product, and a round's update is a sum of few dominant ones. Blocks of consecutive entries locate a
heavy row segment but send all of it; marginals cost (out + rest) cells a matrix instead of out x rest / block
and pick single entries. Like block energies they are not linear: the server learns the cohort's total
movement per row and per column (docs/secagg.md).
"""
from __future__ import annotations

import numpy as np

from .base import check_vector

__all__ = ["Marginals"]


class Marginals:
    """Per-tensor row and column sums of squares of vectors laid out as `shapes` (flat-vector order), with
    CountSketch's interface (one row)."""

    rows = 1
    linear = False  # energies (see CountSketch.linear)

    def __init__(self, shapes):
        self.parts: list[tuple[int, int, int]] = []  # (offset, out, rest); rest 0: cell by cell
        offset = 0
        for shape in shapes:
            shape = tuple(int(s) for s in shape)
            if not shape or any(s < 1 for s in shape):
                raise ValueError(f"tensor shapes must be non-empty with positive sizes, got {shape}")
            size = int(np.prod(shape))
            out, rest = shape[0], size // shape[0]
            self.parts.append((offset, out, rest) if len(shape) > 1 and out > 1 and rest > 1 else (offset, size, 0))
            offset += size
        if offset < 1:
            raise ValueError("no tensors to summarize")
        self.length = offset
        self.cols = sum(out + rest for _, out, rest in self.parts)

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        """The (1, cols) float32 table: per matrix its row energies then its column energies; 1-D tensors'
        squares (float64 sums)."""
        vector = check_vector(vector)
        if vector.size != self.length:
            raise ValueError(f"expected a vector of length {self.length}, got {vector.size}")
        cells = []
        for offset, out, rest in self.parts:
            if rest == 0:
                cells.append(np.square(vector[offset:offset + out], dtype=np.float64))
                continue
            squares = np.square(vector[offset:offset + out * rest], dtype=np.float64).reshape(out, rest)
            cells += [squares.sum(axis=1), squares.sum(axis=0)]
        with np.errstate(over="ignore"):  # an energy beyond float32 becomes inf, which quantizing refuses
            return np.concatenate(cells).astype(np.float32).reshape(1, self.cols)

    def estimate(self, table: np.ndarray) -> np.ndarray:
        """Each entry's estimated energy (float64, length entries) from a (summed) table."""
        table = np.asarray(table, np.float64).reshape(-1)
        if table.size != self.cols:
            raise ValueError(f"expected {self.cols} marginal cells, got {table.size}")
        if not np.isfinite(table).all():
            raise ValueError("marginal energies contain NaN or Inf")
        table = np.maximum(table, 0.0)  # stochastic rounding of a zero sum can land a level below
        energy = np.empty(self.length, np.float64)
        cell = 0
        for offset, out, rest in self.parts:
            if rest == 0:
                energy[offset:offset + out] = table[cell:cell + out]
                cell += out
                continue
            row, col = table[cell:cell + out], table[cell + out:cell + out + rest]
            cell += out + rest
            total = 0.5 * (row.sum() + col.sum())  # the two sums differ only by rounding
            energy[offset:offset + out * rest] = np.outer(row, col).ravel() / total if total > 0 else 0.0
        return energy

    def heavy_hitters(self, table: np.ndarray, k: int) -> np.ndarray:
        """Sorted int64 positions: the k entries of largest estimated energy (ties go to the lower position)."""
        if not 1 <= k <= self.length:
            raise ValueError(f"k must be in [1, {self.length}], got {k}")
        energy = self.estimate(table)
        kth = np.partition(energy, self.length - k)[self.length - k]  # the k-th largest estimate
        above = np.flatnonzero(energy > kth)
        ties = np.flatnonzero(energy == kth)[:k - above.size]
        return np.sort(np.concatenate([above, ties])).astype(np.int64)

    def __repr__(self) -> str:
        return f"Marginals(length={self.length}, cells={self.cols})"
