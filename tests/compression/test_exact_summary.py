"""The bounds of `fresh`: the update itself (`exact`: the server takes the exact top k of the cohort's sum) and its
squares (`energy`: the top k of the cohort's energy per entry)."""

import numpy as np
import pytest

from compression.exact_summary import EnergySummary, ExactSummary
from compression.index_policy import IndexPolicy


def test_summed_tables_are_the_summed_update_and_its_top_k_is_chosen_even_where_energies_mislead():
    """Two clients move entry 0 in opposite directions (the largest energy, a zero sum) and entry 3 the same
    way: the sum's top 1 is entry 3, which an energy summary cannot see."""
    s = ExactSummary(6)
    a = np.array([5.0, 0, 0, 1.0, 0.1, 0], np.float32)
    b = np.array([-5.0, 0, 0, 1.0, 0, -0.2], np.float32)
    table = s.sketch(a) + s.sketch(b)
    assert table.shape == (1, 6) and table.dtype == np.float32
    np.testing.assert_array_equal(table[0], a + b)
    np.testing.assert_array_equal(s.heavy_hitters(table, 1), [3])
    np.testing.assert_array_equal(s.heavy_hitters(table, 3), [3, 4, 5])
    rng = np.random.default_rng(0)
    u = rng.normal(size=(5, 1000)).astype(np.float32)
    table = np.sum([ExactSummary(1000).sketch(v) for v in u], 0)
    chosen = ExactSummary(1000).heavy_hitters(table, 37)
    np.testing.assert_array_equal(chosen, np.sort(np.argsort(-np.abs(u.sum(0)))[:37]))


def test_bad_input_is_refused():
    s = ExactSummary(4)
    with pytest.raises(ValueError, match="length 4"):
        s.sketch(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        s.heavy_hitters(np.array([[0, np.nan, 0, 1]]), 1)
    with pytest.raises(ValueError, match="k must be"):
        s.heavy_hitters(np.zeros((1, 4)), 5)
    with pytest.raises(ValueError, match="positive integer"):
        ExactSummary(0)


def test_the_policy_masks_the_whole_update_first_and_names_itself():
    policy = IndexPolicy("fresh", 500, 5, root_seed=1, summary="exact")
    assert policy.name == "fresh(exact)" and policy.fresh and policy.shape == (1, 500)
    assert policy.positions(0) == (None, 0)
    table = np.zeros((1, 500))
    table[0, [7, 99, 3, 400, 250]] = [1, -2, 3, -4, 5]
    np.testing.assert_array_equal(policy.choose(0, table), [3, 7, 99, 250, 400])


def test_summed_energies_pick_where_the_cohort_moves_most_even_where_the_moves_cancel():
    """The same two clients: entry 0's moves cancel in the sum but carry the most energy, so `energy` picks it
    first; over random updates its choice is the top k of the summed squares."""
    s = EnergySummary(6)
    a = np.array([5.0, 0, 0, 1.0, 0.1, 0], np.float32)
    b = np.array([-5.0, 0, 0, 1.0, 0, -0.2], np.float32)
    table = s.sketch(a) + s.sketch(b)
    assert table.shape == (1, 6) and table.dtype == np.float32
    np.testing.assert_array_equal(table[0], a * a + b * b)
    np.testing.assert_array_equal(s.heavy_hitters(table, 1), [0])
    np.testing.assert_array_equal(s.heavy_hitters(table, 2), [0, 3])
    rng = np.random.default_rng(1)
    u = rng.normal(size=(5, 1000)).astype(np.float32)
    table = np.sum([EnergySummary(1000).sketch(v) for v in u], 0)
    chosen = EnergySummary(1000).heavy_hitters(table, 37)
    np.testing.assert_array_equal(chosen, np.sort(np.argsort(-np.square(u).sum(0))[:37]))
    assert not np.array_equal(chosen, ExactSummary(1000).heavy_hitters(u.sum(0, keepdims=True), 37))


def test_an_energy_beyond_float32_is_inf_and_refused_where_it_would_be_chosen():
    s = EnergySummary(3)
    table = s.sketch(np.array([3e19, 1.0, 0.0], np.float32))
    assert np.isinf(table[0, 0]) and table[0, 1] == 1.0
    with pytest.raises(ValueError, match="NaN or Inf"):
        s.heavy_hitters(table, 1)
    with pytest.raises(ValueError, match="length 3"):
        s.sketch(np.zeros(4, np.float32))


def test_the_energy_policy_masks_the_squares_first_and_names_itself():
    policy = IndexPolicy("fresh", 500, 5, root_seed=1, summary="energy")
    assert policy.name == "fresh(energy)" and policy.fresh and policy.shape == (1, 500)
    assert isinstance(policy.sketch(0), EnergySummary) and policy.positions(0) == (None, 0)
    table = np.zeros((1, 500))
    table[0, [7, 99, 3, 400, 250, 12]] = [1, 2, 3, 4, 5, 0.5]
    np.testing.assert_array_equal(policy.choose(0, table), [3, 7, 99, 250, 400])
