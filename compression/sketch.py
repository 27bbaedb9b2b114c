"""Count sketch: a small linear summary of a long vector from which its large entries can be found."""

from __future__ import annotations

import numpy as np

from .base import check_vector
from .topk import topk_positions

__all__ = ["CountSketch"]


class CountSketch:
    """A rows x cols count sketch of vectors of `length` (Charikar et al. 2002).

    Row r adds sign[r, i] * v[i] into column bucket[r, i]; an entry is estimated as the median over
    rows of sign[r, i] * table[r, bucket[r, i]]. The sketch is linear, so it commutes with pairwise
    masking: the sum of the clients' (masked) sketches is the sketch of the sum of their vectors,
    and the server can find the heavy hitters of the aggregate without seeing any one client's.

    The hashes come from np.random.default_rng(seed) with a PUBLIC seed: every client and the server
    must share them, and they protect nothing (the masks do that). Buckets are stored as int32 and
    signs as int8 (5 bytes per row per coordinate).

    Size of a table: rows * cols float32 values, 4 * rows * cols bytes.
    """

    linear = True  # in the vector: two sums of tables over different clients differ by a client's own table

    def __init__(self, rows: int, cols: int, length: int, seed: int):
        for label, value in (("rows", rows), ("cols", cols), ("length", length)):
            if int(value) != value or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        if cols > np.iinfo(np.int32).max:
            raise ValueError(f"cols must fit in int32, got {cols}")
        self.rows, self.cols, self.length, self.seed = int(rows), int(cols), int(length), seed
        rng = np.random.default_rng(seed)
        self.buckets = rng.integers(0, self.cols, size=(self.rows, self.length), dtype=np.int32)
        self.signs = rng.integers(0, 2, size=(self.rows, self.length), dtype=np.int8) * 2 - 1

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        """The (rows, cols) float32 table of `vector`."""
        vector = check_vector(vector)
        if vector.size != self.length:
            raise ValueError(f"expected a vector of length {self.length}, got {vector.size}")
        table = np.empty((self.rows, self.cols), dtype=np.float32)
        weights = np.empty(self.length, dtype=np.float64)  # reused: fresh large arrays cost page faults
        for r in range(self.rows):  # bincount sums in float64, so rounding does not pile up in a bucket
            np.multiply(vector, self.signs[r], out=weights)
            table[r] = np.bincount(self.buckets[r], weights=weights, minlength=self.cols)
        return table

    def estimate(self, table: np.ndarray) -> np.ndarray:
        """Float32 estimate of every entry of the sketched vector: median over rows.

        Rows 1, 3 and 5 use min/max networks written into preallocated rows (np.median along a short
        axis is ~50x slower, and on long vectors every fresh temporary costs page faults).
        """
        table = self._check_table(table)
        per_row = np.empty((self.rows, self.length), dtype=np.float32)
        for r in range(self.rows):
            np.take(table[r], self.buckets[r], out=per_row[r])
            np.multiply(per_row[r], self.signs[r], out=per_row[r])
        if self.rows == 1:
            return per_row.reshape(self.length)
        if self.rows == 3:
            return _median3(*per_row, out=np.empty(self.length, dtype=np.float32))
        if self.rows == 5:  # drop the smallest and the largest of rows 0-3 (neither can be the median)
            a, b, c, d, e = per_row
            out = np.minimum(a, b)
            np.maximum(a, b, out=a)
            np.minimum(c, d, out=b)
            np.maximum(c, d, out=c)
            np.maximum(out, b, out=b)  # the larger of the two small ones
            np.minimum(a, c, out=c)  # the smaller of the two large ones
            return _median3(e, b, c, out=out)
        # in float64: an even row count averages the two middle values, whose float32 sum can overflow
        return np.median(per_row.astype(np.float64), axis=0).astype(np.float32)

    def heavy_hitters(self, table: np.ndarray, k: int) -> np.ndarray:
        """Sorted int64 positions of the k entries with the largest estimated magnitude."""
        return topk_positions(self.estimate(table), k)

    def _check_table(self, table) -> np.ndarray:
        table = np.asarray(table)
        if table.shape != (self.rows, self.cols):
            raise ValueError(f"expected a sketch table of shape {(self.rows, self.cols)}, got {table.shape}")
        table = table.astype(np.float32, copy=False)
        if not np.isfinite(table).all():
            raise ValueError("sketch table contains NaN or Inf")
        return table

    def __repr__(self) -> str:
        return f"CountSketch(rows={self.rows}, cols={self.cols}, length={self.length}, seed={self.seed!r})"


def _median3(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Elementwise median of three into `out` (overwrites `a`; `out` must not alias the inputs)."""
    np.minimum(a, b, out=out)
    np.maximum(a, b, out=a)
    np.minimum(a, c, out=a)
    return np.maximum(out, a, out=out)
