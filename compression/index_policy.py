"""Shared index sets for compression under masking: which k positions every client sends this round.

Pairwise masks cancel only coordinate by coordinate, so with secure aggregation all clients of a round
must send the same positions I_r. The policy is public: the server computes I_r from what it is allowed
to see (masked sums) or from a public seed, and broadcasts it. Policies:

- `fresh`: I_r from round r's own updates, in two masked exchanges (FetchSGD's idea with exact values):
  clients first mask a summary of their weighted error-corrected update: its row and column energies per
  weight tensor (compression.marginals, the default), its block energies (compression.blocks) or a count
  sketch; the server takes the entries of largest estimated energy (the heaviest blocks, the sketch's heavy
  hitters) of the summed summary as I_r and sends it; clients then mask their values at I_r. The `exact` and
  `energy` summaries (compression.exact_summary, dense uploads) are bounds: the top k of the summed update
  itself, and of the cohort's exact energy per entry, which `marginals` estimates.
- `sketch`: I_{r+1} = heavy hitters of the summed count sketch of the clients' error-feedback residuals
  (the sketch is linear, so the masked sum of sketches is the sketch of the summed residual). Round 0, and
  every round when no sketch can pay for itself (`sketch_shape`), use a public random set; the round after an
  aborted one (no sum, so no new sketch) keeps the last set, as `prev_topk` does.
- `randk`: a fresh public random set each round (no extra bytes).
- `prev_topk`: top of the previous aggregate plus a public random share (a baseline; it starves positions
  it never picks).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from compression.base import decimal
from compression.blocks import BlockEnergy
from compression.exact_summary import EnergySummary, ExactSummary
from compression.marginals import Marginals
from compression.sketch import CountSketch
from compression.topk import topk_positions

POLICIES = ("fresh", "sketch", "randk", "prev_topk")
SUMMARIES = ("marginals", "blocks", "sketch", "exact", "energy")  # what `fresh` masks first
PURPOSE_INDEX = 1
PURPOSE_SKETCH = 2


def public_seed(root: int, round: int, purpose: int) -> int:
    """A public per-round seed: the same on the server and every client, different per purpose."""
    return int(np.random.SeedSequence([int(root), int(round), int(purpose)]).generate_state(1, np.uint64)[0] >> 1)


def random_positions(length: int, k: int, seed: int) -> np.ndarray:
    """k distinct positions of [0, length), sorted, from a public seed."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(length, size=k, replace=False)).astype(np.int64)


def sketch_shape(length: int, k: int, rows: int, cols_per_k: float) -> tuple[int, int] | None:
    """(rows, cols) of the residual sketch, or None when a sketch cannot pay for itself.

    Wanted: rows x ceil(cols_per_k * k), cols_per_k read as the decimal it prints as (as a ratio is). Cap:
    values + sketch must leave the upload at most length - k cells (a sketch never makes the upload approach
    dense). If the capped sketch has fewer cells than k, it cannot locate k heavy hitters and the policy falls
    back to `randk` (None).
    """
    cols = math.ceil(decimal(cols_per_k) * k)
    budget = length - 2 * k
    if rows * cols > budget:
        cols = budget // rows
    if rows * cols < k or cols < 1:
        return None
    return rows, cols


class IndexPolicy:
    """Server-side state of a shared-index policy. Steps per round r:

    1. `positions(r)` -> the sorted index set I_r and the public seed it came from (seed != 0 means
       clients can derive I_r from the seed alone, so the positions need not be sent); under `fresh`
       (None, 0): the set is chosen mid-round, by `choose(r, sketch_table)`;
    2. `sketch(r)` -> the table clients fill this round (a CountSketch, or `fresh`'s summary), or None;
    3. `observe(r, positions, aggregate, sketch_table)` after the server has the round's sum.
    """

    def __init__(self, name: str, length: int, k: int, root_seed: int, sketch_rows: int = 1,
                 sketch_cols_per_k: float = 2.0, random_share: float = 0.1, summary: str = "sketch",
                 block: int = 64, shapes=None):
        if name not in POLICIES:
            raise ValueError(f"unknown index policy {name!r}; available: {', '.join(POLICIES)}")
        if not 1 <= k <= length:
            raise ValueError(f"k must be in [1, {length}], got {k}")
        self.length, self.k, self.root = length, k, root_seed
        if summary not in SUMMARIES:
            raise ValueError(f"unknown fresh summary {summary!r}; available: {', '.join(SUMMARIES)}")
        # `fresh` with blocks, marginals, the update or its squares: one table row, picked by its heavy_hitters
        self.summary = None
        if name == "fresh" and summary == "blocks":
            self.summary = BlockEnergy(length, block)
        elif name == "fresh" and summary == "exact":
            self.summary = ExactSummary(length)
        elif name == "fresh" and summary == "energy":
            self.summary = EnergySummary(length)
        elif name == "fresh" and summary == "marginals":
            self.summary = Marginals(shapes if shapes is not None else [(length,)])
            if self.summary.length != length:
                raise ValueError(f"tensor shapes cover {self.summary.length} entries, the model has {length}")
        sketched = name == "sketch" or (name == "fresh" and self.summary is None)
        self.shape = sketch_shape(length, k, sketch_rows, sketch_cols_per_k) if sketched else None
        if self.summary is not None:
            self.shape = (1, self.summary.cols)
        self.requested = name
        self.name = f"randk({name} fallback)" if sketched and self.shape is None else name
        if self.summary is not None:
            self.name = f"fresh(blocks of {block})" if summary == "blocks" else f"fresh({summary})"
        if k == length:  # every position is sent: no summary or sketch to choose them (nor bytes to pay for one)
            self.name, self.shape, self.summary = "all", None, None
        self.fresh = name == "fresh" and self.shape is not None  # two masked exchanges a round
        self.random_share = random_share
        self._next: np.ndarray | None = None
        self._sketch: tuple[int, CountSketch] | None = None

    def positions(self, round: int) -> tuple[np.ndarray, int]:
        if self.k == self.length:
            return np.arange(self.length, dtype=np.int64), 0
        if self.fresh:
            return None, 0
        if self._next is not None:
            return self._next, 0
        seed = public_seed(self.root, round, PURPOSE_INDEX)
        return random_positions(self.length, self.k, seed), seed

    def sketch(self, round: int) -> CountSketch | BlockEnergy | Marginals | ExactSummary | EnergySummary | None:
        if self.summary is not None:
            return self.summary
        if self.shape is None:
            return None
        if self._sketch is None or self._sketch[0] != round:
            rows, cols = self.shape
            self._sketch = (round, CountSketch(rows, cols, self.length, public_seed(self.root, round, PURPOSE_SKETCH)))
        return self._sketch[1]

    def choose(self, round: int, sketch_table: np.ndarray) -> np.ndarray:
        """`fresh`: this round's index set, the heavy hitters of the summed sketch of this round's updates."""
        return self.sketch(round).heavy_hitters(sketch_table.reshape(self.shape), self.k)

    def observe(self, round: int, positions: np.ndarray, aggregate: np.ndarray,
                sketch_table: np.ndarray | None) -> None:
        if self.requested == "sketch" and sketch_table is not None:
            self._next = self.sketch(round).heavy_hitters(sketch_table, self.k)
        elif self.requested == "prev_topk" and self.k < self.length:
            n_random = min(self.k, max(1, round_half(decimal(self.random_share) * self.k)))
            keep = positions[topk_positions(aggregate.astype(np.float32), self.k - n_random)] \
                if self.k > n_random else np.empty(0, np.int64)
            rng = np.random.default_rng(public_seed(self.root, round + 1, PURPOSE_INDEX))
            free = np.setdiff1d(np.arange(self.length), keep, assume_unique=True)
            extra = rng.choice(free, size=n_random, replace=False)
            self._next = np.sort(np.concatenate([keep, extra])).astype(np.int64)


def round_half(x) -> int:
    """x rounded half up; give a Fraction where the half matters (0.58 * 25 is 14.499999999999998 in binary)."""
    return int(math.floor(x + Fraction(1, 2)))
