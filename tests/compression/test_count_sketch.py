"""CountSketch: linear, deterministic from its public seed, and finds large entries."""

import numpy as np
import pytest

import compression
from compression import CountSketch


def reference_table(sketch, vector):
    table = np.zeros((sketch.rows, sketch.cols), np.float64)
    for r in range(sketch.rows):
        for i, value in enumerate(vector):
            table[r, sketch.buckets[r, i]] += sketch.signs[r, i] * value
    return table


def test_table_matches_the_definition():
    vector = np.random.default_rng(0).standard_normal(300).astype(np.float32)
    sketch = CountSketch(rows=3, cols=17, length=300, seed=5)
    table = sketch.sketch(vector)
    assert table.shape == (3, 17) and table.dtype == np.float32
    np.testing.assert_allclose(table, reference_table(sketch, vector), rtol=1e-5, atol=1e-5)


def test_sketch_is_linear_so_it_commutes_with_summing_masked_updates():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 10_000)).astype(np.float32)
    sketch = CountSketch(rows=3, cols=200, length=10_000, seed=9)
    np.testing.assert_allclose(sketch.sketch(a) + sketch.sketch(b), sketch.sketch(a + b), atol=1e-3)
    np.testing.assert_allclose(sketch.sketch(3 * a), 3 * sketch.sketch(a), rtol=1e-5, atol=1e-4)


def test_heavy_hitters_recover_planted_spikes_in_noise():
    rng = np.random.default_rng(2)
    n = 100_000
    vector = rng.standard_normal(n).astype(np.float32)
    spikes = np.sort(rng.choice(n, 50, replace=False))
    vector[spikes] = 100 * rng.choice([-1.0, 1.0], 50)
    # 5 x 10k: for a noise entry to look like a spike, 3 of its 5 buckets must hold a spike
    # (expected ~0.1 such entries). With 3 x 2k, two of three suffice and ~90 entries do.
    sketch = CountSketch(rows=5, cols=10_000, length=n, seed=3)
    found = sketch.heavy_hitters(sketch.sketch(vector), 50)
    assert found.dtype == np.int64
    assert np.array_equal(found, spikes)


def test_single_entry_is_estimated_exactly():
    vector = np.zeros(1000, np.float32)
    vector[123] = -4.5
    for rows in (1, 3, 4):
        sketch = CountSketch(rows=rows, cols=50, length=1000, seed=0)
        estimate = sketch.estimate(sketch.sketch(vector))
        assert estimate.shape == (1000,) and estimate.dtype == np.float32
        assert estimate[123] == -4.5
        assert sketch.heavy_hitters(sketch.sketch(vector), 1).tolist() == [123]


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5])
def test_estimate_is_the_median_over_rows_of_signed_buckets(rows):
    vector = np.random.default_rng(4).standard_normal(2000).astype(np.float32)
    sketch = CountSketch(rows=rows, cols=64, length=2000, seed=1)
    table = sketch.sketch(vector)
    per_row = np.stack([sketch.signs[r] * table[r, sketch.buckets[r]] for r in range(rows)])
    np.testing.assert_allclose(sketch.estimate(table), np.median(per_row, axis=0), rtol=1e-6)


@pytest.mark.parametrize("rows", [2, 4])
def test_an_even_median_of_huge_finite_values_is_finite(rows):
    """The mean of the two middle rows fits in float32 whenever the rows do; their float32 sum need not."""
    sketch = CountSketch(rows=rows, cols=64, length=64, seed=1)
    vector = np.zeros(64, np.float32)
    vector[5] = 3e38
    estimate = sketch.estimate(sketch.sketch(vector))
    assert np.isfinite(estimate).all() and estimate[5] == np.float32(3e38)
    codec = compression.get("countsketch")(ratio=1.0, rows=rows, cols_per_k=1)
    assert codec.decode(codec.encode(vector), 64)[5] == np.float32(3e38)


@pytest.mark.parametrize("rows", [3, 5])
def test_median_ignores_a_collision_in_a_minority_of_rows(rows):
    sketch = CountSketch(rows=rows, cols=50, length=1000, seed=0)
    spike = 0
    shares_one_row = (sketch.buckets == sketch.buckets[:, [spike]]).sum(axis=0) == 1
    entry = int(np.flatnonzero(shares_one_row)[0])
    vector = np.zeros(1000, np.float32)
    vector[spike], vector[entry] = 1000.0, 1.0
    estimate = sketch.estimate(sketch.sketch(vector))
    assert estimate[entry] == 1.0 and estimate[spike] == 1000.0


def test_same_seed_gives_same_hashes_and_another_seed_different_ones():
    one, two, other = (CountSketch(3, 100, 5000, seed=s) for s in (42, 42, 43))
    assert np.array_equal(one.buckets, two.buckets) and np.array_equal(one.signs, two.signs)
    assert not np.array_equal(one.buckets, other.buckets)
    assert one.buckets.dtype == np.int32 and one.signs.dtype == np.int8
    assert one.buckets.min() >= 0 and one.buckets.max() < 100
    assert set(np.unique(one.signs)) == {-1, 1}


def test_wrong_shapes_are_rejected():
    sketch = CountSketch(rows=2, cols=10, length=100, seed=0)
    with pytest.raises(ValueError, match="shape"):
        sketch.estimate(np.zeros((2, 11)))
    with pytest.raises(ValueError, match="shape"):
        sketch.heavy_hitters(np.zeros((3, 10)), 5)
    with pytest.raises(ValueError, match="length 100"):
        sketch.sketch(np.zeros(99))
    with pytest.raises(ValueError, match="positive"):
        CountSketch(rows=0, cols=10, length=100, seed=0)
