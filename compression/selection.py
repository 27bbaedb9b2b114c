"""Top-k selection: which k entries a top-k style codec keeps (exactly k, ties to the lowest index).

Separate from `positions`, which only stores a chosen set; a sampled threshold changes the cost, never the result.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .base import NON_FINITE, decimal
from .packing import layer_sizes

__all__ = [
    "topk_count",
    "layered_count",
    "topk_positions",
    "select_topk",
    "sample_index",
]

_SAMPLED_MIN_LENGTH = 4096  # below this a sample would be a large share of the vector: use the exact threshold


def topk_count(n: int, ratio: float) -> int:
    """k = ceil(ratio * n), clamped to [1, n], with `ratio` read as the decimal it prints as.

    In binary floating point 0.07 * 100 is 7.000000000000001, whose ceiling is 8; reading the ratio
    as the decimal the user wrote in the config gives the k they meant (7).
    """
    return _topk_count(int(n), float(ratio))


@functools.lru_cache(maxsize=1024)
def _topk_count(n: int, ratio: float) -> int:  # cached: decimal() is slow, and a run asks for few (n, ratio)
    return min(max(math.ceil(decimal(ratio) * n), 1), n)


def layered_count(n: int, ratio: float, layout) -> int:
    """Entries kept of a length-n vector: ceil(ratio x n) globally, or per layer when a layout is given."""
    if layout is None:
        return topk_count(n, ratio)
    return sum(topk_count(size, ratio) for size in layer_sizes(layout, n).tolist())


def topk_positions(vector: np.ndarray, k: int, sample: np.ndarray | None = None) -> np.ndarray:
    """Sorted int64 positions of exactly `k` largest |vector| entries; ties go to the lowest index.

    `sample` (positions from `sample_index`) switches to the sampled threshold; the result is the
    same. `vector` must be 1-D and finite.
    """
    magnitude = np.abs(np.asarray(vector))
    n = magnitude.size
    if magnitude.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {magnitude.shape}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    if not np.isfinite(magnitude).all():
        raise ValueError("vector contains NaN or Inf")
    return _select(magnitude, k, sample)[0]


def select_topk(vector: np.ndarray, ratio: float, layout: np.ndarray | None = None,
                sampled_seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted int64 positions, boolean mask of them) for a non-empty 1-D float32 vector.

    Without `layout`, k = topk_count(n, ratio) over the whole vector (global selection); with it
    (int64 layer sizes summing to n), topk_count(size, ratio) in each layer separately. A
    `sampled_seed` selects the sampled threshold (same result, see `_sampled_threshold`).
    ValueError if the vector holds NaN or Inf (checked on the magnitudes, which are needed anyway).
    """
    magnitude = np.abs(vector)
    if not np.isfinite(magnitude.max()):  # NaN propagates through max, and |-Inf| = Inf
        raise ValueError(NON_FINITE)
    if layout is None or layout.size == 1:
        sample = None if sampled_seed is None else sample_index(vector.size, sampled_seed)
        return _select(magnitude, topk_count(vector.size, ratio), sample)
    parts, masks, start = [], [], 0
    for size in layout.tolist():
        sample = None if sampled_seed is None else sample_index(size, sampled_seed)
        positions, mask = _select(magnitude[start:start + size], topk_count(size, ratio), sample)
        parts.append(positions + start)
        masks.append(mask)
        start += size
    return np.concatenate(parts), np.concatenate(masks)


@functools.lru_cache(maxsize=64)
def sample_index(n: int, seed: int = 0) -> np.ndarray | None:
    """Random positions (with repetition) at which the sampled threshold looks, or None for short vectors.

    Size min(n, max(1024, 16 * sqrt(n))); fixed per (n, seed), so repeated encodes pay for it once.
    """
    if n < _SAMPLED_MIN_LENGTH:
        return None
    size = min(n, max(1024, int(16 * math.sqrt(n))))
    index = np.random.default_rng([seed, n]).integers(0, n, size=size)
    index.setflags(write=False)
    return index


def _select(magnitude: np.ndarray, k: int, sample: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Exactly k positions of the largest magnitudes (lowest index first among ties) and their mask."""
    n = magnitude.size
    if k == n:
        return np.arange(n, dtype=np.int64), np.ones(n, dtype=bool)
    threshold = _sampled_threshold(magnitude, k, sample) if sample is not None else None
    if threshold is None:
        threshold = np.partition(magnitude, n - k)[n - k]
    mask = magnitude >= threshold
    count = int(np.count_nonzero(mask))
    if count > k:  # too many ties at the threshold: keep the lowest-index ones
        ties = np.flatnonzero(magnitude == threshold)
        mask[ties[k - (count - ties.size):]] = False
    return np.flatnonzero(mask).astype(np.int64, copy=False), mask


def _sampled_threshold(magnitude: np.ndarray, k: int, sample: np.ndarray):
    """The exact k-th largest magnitude, found from a sample, or None (then the caller partitions all).

    1. From the sample, bracket the threshold: t_high with about k - 4 sigma entries above it, t_low
       with about k + 4 sigma (sigma: the binomial spread of the sample count).
    2. Count above = #(m > t_high); the band = entries in [t_low, t_high]. If above < k <= above +
       band size, the k-th largest overall is the (k - above)-th largest of the band: partition only
       the band. Otherwise (a bad sample), or when the band holds more than half the entries, return None.
    """
    n = magnitude.size
    values = magnitude.take(sample)
    s = values.size
    kept = k / n
    spread = 4.0 * math.sqrt(s * kept * (1.0 - kept)) + 2.0
    low_rank = math.floor(s * (1.0 - kept) - spread)  # ascending rank of t_low in the sample
    high_rank = math.ceil(s * (1.0 - kept) + spread)
    ranks = [r for r in (low_rank, high_rank) if 0 <= r < s]
    if ranks:
        values = np.partition(values, ranks)
    t_low = values[low_rank] if low_rank >= 0 else magnitude.dtype.type(0)
    if high_rank < s:
        t_high = values[high_rank]
        above = int(np.count_nonzero(magnitude > t_high))
        in_band = (magnitude >= t_low) & (magnitude <= t_high)
    else:
        above = 0
        in_band = magnitude >= t_low
    band = magnitude[in_band]
    if not above < k <= above + band.size or band.size > n // 2:
        return None
    rank = band.size - (k - above)
    return np.partition(band, rank)[rank]
