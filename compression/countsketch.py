"""Count-sketch compression (FetchSGD, Rothchild et al. 2020): send a linear sketch, recover heavy hitters.

Design:
1. Client: table = CountSketch(rows, cols, n, seed).sketch(update); the payload is the table. The
   hashes come from a PUBLIC seed shared by every client, so tables of different clients add up.
2. The sketch is linear: sum of tables = table of the sum. A server can therefore add payload
   tables (`add_tables`), or receive their sum under secure-aggregation masking (the table is just
   rows * cols more cells of the masked vector), and never see one client's table.
3. Decode (one table or a sum): estimate every entry (median over rows of the signed bucket), keep
   the k largest estimates (heavy hitters), zeros elsewhere.
4. Server-side error feedback (FetchSGD): `SketchAccumulator` keeps the running sum of tables; each
   round it extracts the top-k of its estimate and subtracts the sketch of what it extracted, so
   its table is always the sketch of (everything added - everything extracted). Nothing the
   clients sent is lost, only delayed, without the server ever holding a dense update.
"""

from __future__ import annotations

import functools
import math
import numbers
import struct

import numpy as np

from .base import (Codec, DecodeError, check_length, check_payload_length, check_seed, check_vector, decimal,
                   read_header)
from .packing import check_encodable_length, check_total
from .registry import register
from .selection import topk_positions
from .sketch import CountSketch

__all__ = ["CountSketchCompression", "SketchAccumulator"]

VERSION = 1
_HEADER = struct.Struct("<BIIIIQ")  # version, n, rows, cols, k, seed
_MAX_ROWS = 64


@functools.lru_cache(maxsize=2)
def _hashes(rows: int, cols: int, n: int, seed: int) -> CountSketch:
    """The sketch's hashes for these parameters; cached, since every message of a round shares them
    (2 entries: rows * n int32 buckets and int8 signs each, 250 MB for n = 1e7 and 5 rows)."""
    return CountSketch(rows, cols, n, seed)


@functools.lru_cache(maxsize=256)
def _heavy_count(cols: int, cols_per_k: float) -> int:
    return max(1, math.floor(cols / decimal(cols_per_k)))


@functools.lru_cache(maxsize=256)
def _columns(ratio: float, n: int, rows: int) -> int:
    return max(1, math.floor(decimal(ratio) * n / rows))


class CountSketchCompression(Codec):
    """A rows x cols count sketch of the update; decoding returns its k heavy hitters.

    Shape for a vector of n: cols = max(1, floor(ratio * n / rows)), so the table holds about ratio * n
    float32 cells (the payload is about ratio * 4n bytes, like a dense vector of ratio * n);
    k = min(n, max(1, floor(cols / cols_per_k))) heavy hitters are decoded (cols_per_k, too, read as its decimal).

    Options:
      rows:       5 (default), 1 to 64: the estimate is the median over rows.
      cols_per_k: 16.0 (default): columns per decoded heavy hitter.
      seed:       0 (default): the PUBLIC hash seed; every client and the server must use the same.

    Why these defaults: the values come from the sketch, so the decoded entries must be true heavy
    hitters. With one row every entry of a bucket gets the bucket's whole value, and decoding k =
    cols/2 entries multiplies the mass, so error feedback diverges; 5 rows with k = cols/16 keep the
    residual from exploding down to ratio 0.01, where 3 rows or k = cols/8 do not. It is not bounded: each
    decoded estimate's error goes back into the residual, which grows like a random walk, faster than a
    client that sends nothing (docs/performance.md, `python -m experiments.sketch_feedback`).
    (The index policy's 1-row sketch is a different use: it only picks positions, whose values then
    travel exactly.) FetchSGD itself used 5 rows and k = cols/20.

    Biased (top-k of an estimate): use with error feedback, on the client (`ErrorFeedback`) or on
    the server (`SketchAccumulator`, the FetchSGD way).

    Payload (format version 1), all little-endian:
        uint8   format version (1)
        uint32  n
        uint32  rows (1..64)
        uint32  cols (1..n)
        uint32  k, heavy hitters to decode (1..n)
        uint64  hash seed (`compression.sketch.CountSketch(rows, cols, n, seed)`)
        rows * cols float32 cells, row-major (finite)

    Size: 25 + 4 * rows * cols bytes.
    """

    name = "countsketch"
    biased = True
    linear = True  # tables add up: it commutes with pairwise masking

    def __init__(self, ratio: float = 0.5, rows: int = 5, cols_per_k: float = 16.0, seed: int = 0):
        super().__init__(ratio)
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 1 <= rows <= _MAX_ROWS:
            raise ValueError(f"rows must be an integer in [1, {_MAX_ROWS}], got {rows!r}")
        if isinstance(cols_per_k, bool) or not isinstance(cols_per_k, numbers.Real) or not (
                math.isfinite(cols_per_k) and cols_per_k > 0):
            raise ValueError(f"cols_per_k must be a positive number, got {cols_per_k!r}")
        seed = check_seed(seed)
        if seed is None or seed >= 2**64:
            raise ValueError("countsketch needs a fixed public seed below 2**64 (clients' tables must add up)")
        self.rows, self.cols_per_k, self.seed = int(rows), float(cols_per_k), seed

    # --- shape -------------------------------------------------------------------------------------

    def shape_for(self, n: int) -> tuple[int, int]:
        """(rows, cols) of the table for a vector of length n: cols = max(1, floor(ratio * n / rows)),
        with the ratio read as the decimal it prints as (as top-k's k)."""
        return self.rows, _columns(self.ratio, int(n), self.rows)

    def k_for(self, n: int) -> int:
        """Heavy hitters decoded for a vector of length n."""
        return min(n, _heavy_count(self.shape_for(n)[1], self.cols_per_k))

    def hashes(self, n: int) -> CountSketch:
        """The (cached) CountSketch this codec uses for vectors of length n."""
        rows, cols = self.shape_for(n)
        return _hashes(rows, cols, n, self.seed)

    # --- client side -------------------------------------------------------------------------------

    def table_size(self, n: int) -> int:
        """Cells of the table masked under secure aggregation (rows * cols)."""
        rows, cols = self.shape_for(n)
        return rows * cols

    def masked_table(self, vector: np.ndarray) -> np.ndarray:
        """What a client masks under secure aggregation: the table of its (weighted) update."""
        return self.sketch_table(vector)

    def sketch_table(self, vector: np.ndarray) -> np.ndarray:
        """The (rows, cols) float32 table of `vector`; ValueError if a cell overflows float32."""
        return self._sketch(check_vector(vector))

    def encode(self, vector: np.ndarray) -> bytes:
        vector = check_vector(vector)
        table = self._sketch(vector)
        rows, cols = table.shape
        return (_HEADER.pack(VERSION, vector.size, rows, cols, self.k_for(vector.size), self.seed)
                + table.astype("<f4", copy=False).tobytes())

    def _sketch(self, vector: np.ndarray) -> np.ndarray:
        check_encodable_length(vector.size, "countsketch", allow_empty=False)
        with np.errstate(over="ignore"):
            table = self.hashes(vector.size).sketch(vector)
        if not np.isfinite(table).all():
            raise ValueError("countsketch: a table cell overflows float32 (the input is too large)")
        return table

    # --- server side -------------------------------------------------------------------------------

    def table(self, payload: bytes, length: int) -> np.ndarray:
        """The payload's table (float32, rows x cols), strictly checked."""
        return self._read(payload, length)[1]

    def add_tables(self, payloads, length: int) -> np.ndarray:
        """Sum of the tables of several payloads (float64 sum, returned as float32); DecodeError if
        they disagree on the sketch (length, shape, k or seed) or one is malformed."""
        total, header = None, None
        for payload in payloads:
            this, table = self._read(payload, length)
            if header is None:
                header, total = this, table.astype(np.float64)
            elif this != header:
                raise DecodeError(f"countsketch payloads disagree: {this} vs {header} (n, rows, cols, k, seed)")
            else:
                total += table
        if total is None:
            raise ValueError("add_tables needs at least one payload")
        with np.errstate(over="ignore"):
            total = total.astype(np.float32)
        if not np.isfinite(total).all():
            raise ValueError("countsketch: the summed table overflows float32")
        return total

    def unsketch(self, table: np.ndarray, length: int, k: int | None = None) -> np.ndarray:
        """Heavy-hitter estimate from a table of THIS codec's shape and seed for `length`: the k
        (default `k_for(length)`) largest estimates at their positions, zeros elsewhere (float32)."""
        length = check_length(length)
        hashes = self.hashes(length)
        positions, values = _heavy_hitters(hashes, table, self.k_for(length) if k is None else k)
        dense = np.zeros(length, dtype=np.float32)
        dense[positions] = values
        return dense

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        (n, rows, cols, k, seed), table = self._read(payload, length)
        positions, values = _heavy_hitters(_hashes(rows, cols, n, seed), table, k)
        dense = np.zeros(n, dtype=np.float32)
        dense[positions] = values
        return dense

    def _read(self, payload: bytes, length: int) -> tuple[tuple[int, int, int, int, int], np.ndarray]:
        length = check_length(length)
        _, n, rows, cols, k, seed = read_header("countsketch", payload, _HEADER, VERSION)
        check_payload_length("countsketch", n, length)
        if not 1 <= rows <= _MAX_ROWS:
            raise DecodeError(f"countsketch rows={rows} out of range [1, {_MAX_ROWS}]")
        if not 1 <= cols <= n:
            raise DecodeError(f"countsketch cols={cols} out of range [1, {n}]")
        if not 1 <= k <= n:
            raise DecodeError(f"countsketch k={k} out of range [1, {n}]")
        check_total("countsketch", len(payload), _HEADER.size + 4 * rows * cols)
        table = np.frombuffer(payload, dtype="<f4", count=rows * cols, offset=_HEADER.size)
        if not np.isfinite(table).all():
            raise DecodeError("countsketch payload contains NaN or Inf cells")
        return (n, rows, cols, k, seed), table.astype(np.float32).reshape(rows, cols)

    def size(self, n: int, k: int | None = None) -> int:
        rows, cols = self.shape_for(n)
        return _HEADER.size + 4 * rows * cols

    def check_sender(self, payload: bytes, length: int) -> None:
        """The payload names its own rows and seed, and decoding builds rows x n hashes from them: the server
        accepts only its own sketch."""
        _, n, rows, cols, k, seed = read_header("countsketch", payload, _HEADER, VERSION)
        check_payload_length("countsketch", n, length)
        ours = (*self.shape_for(n), self.k_for(n), self.seed)
        if (rows, cols, k, seed) != ours:
            raise DecodeError(f"countsketch payload of another sketch: (rows, cols, k, seed) = {(rows, cols, k, seed)},"
                              f" this codec's {ours}")

    def __repr__(self) -> str:
        return (f"CountSketchCompression(ratio={self.ratio}, rows={self.rows}, cols_per_k={self.cols_per_k}, "
                f"seed={self.seed})")


def _heavy_hitters(hashes: CountSketch, table: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted positions, float32 estimates) of the k largest estimated magnitudes."""
    estimate = hashes.estimate(table)
    positions = topk_positions(estimate, k)
    return positions, estimate.take(positions)


class SketchAccumulator:
    """Server-side error feedback in sketch space (FetchSGD). Per round:

    1. `add(table)` for every client's table (or once with their masked sum);
    2. `extract(k)` -> (positions, values): the top-k of the accumulated table's estimate, which the
       server applies; the sketch of exactly that sparse vector is subtracted from the table;
    3. what was not extracted stays in the table and competes again next round.

    By linearity the table is always sketch(sum of added vectors - sum of extracted vectors); it is
    kept in float64 so that rounding does not pile up over rounds.
    """

    def __init__(self, codec: CountSketchCompression, length: int):
        self.codec, self.length = codec, check_length(length)
        self.hashes = codec.hashes(self.length)
        self.table = np.zeros((self.hashes.rows, self.hashes.cols), dtype=np.float64)

    def add(self, table: np.ndarray) -> None:
        table = np.asarray(table)
        if table.shape != self.table.shape:
            raise ValueError(f"expected a sketch table of shape {self.table.shape}, got {table.shape}")
        if not np.isfinite(table).all():
            raise ValueError("sketch table contains NaN or Inf")
        self.table += table

    def extract(self, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(sorted int64 positions, float32 values) of the k heavy hitters (default the codec's k);
        their sketch is subtracted from the accumulated table."""
        k = self.codec.k_for(self.length) if k is None else k
        with np.errstate(over="ignore"):
            positions, values = _heavy_hitters(self.hashes, self.table.astype(np.float32), k)
        for r in range(self.hashes.rows):
            buckets = self.hashes.buckets[r].take(positions)
            signs = self.hashes.signs[r].take(positions)
            self.table[r] -= np.bincount(buckets, weights=signs * values.astype(np.float64), minlength=self.hashes.cols)
        return positions, values


register("countsketch", CountSketchCompression)
