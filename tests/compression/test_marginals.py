"""The `marginals` summary of `fresh`: row and column energies per weight tensor, entries chosen one by one."""

import numpy as np
import pytest

from compression.index_policy import IndexPolicy
from compression.marginals import Marginals

SHAPES = [(6, 1, 5, 5), (6,), (10, 84), (1, 7), (10,)]  # a conv weight, biases, a dense weight, a 1 x n weight


def test_the_table_holds_each_matrix_rows_then_columns_and_each_vector_entry():
    m = Marginals(SHAPES)
    assert m.length == 150 + 6 + 840 + 7 + 10
    assert m.cols == (6 + 25) + 6 + (10 + 84) + 7 + 10  # a 1 x 7 weight is a vector: 7 cells, not 1 + 7
    v = np.random.default_rng(0).normal(size=m.length).astype(np.float32)
    table = m.sketch(v)
    assert table.shape == (1, m.cols) and table.dtype == np.float32
    conv = (v[:150].astype(np.float64) ** 2).reshape(6, 25)
    dense = (v[156:996].astype(np.float64) ** 2).reshape(10, 84)
    expected = np.concatenate([conv.sum(1), conv.sum(0), v[150:156] ** 2, dense.sum(1), dense.sum(0),
                               v[996:] ** 2])
    np.testing.assert_allclose(table[0], expected, rtol=1e-6)
    # every matrix's rows and columns carry the same total: the table is the vector's energy, twice over
    assert table.sum() == pytest.approx(np.sum(v.astype(np.float64) ** 2) + conv.sum() + dense.sum(), rel=1e-5)


def test_on_a_rank_one_energy_matrix_the_estimate_is_exact_and_the_heaviest_entries_are_chosen():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=40), rng.normal(size=30)
    bias = rng.normal(size=5)
    m = Marginals([(40, 30), (5,)])
    v = np.concatenate([np.outer(a, b).ravel(), bias])  # squares of an outer product are rank one
    table = m.sketch(v.astype(np.float64)).astype(np.float64)
    np.testing.assert_allclose(m.estimate(table), v ** 2, rtol=1e-5)
    for k in (1, 17, 300, 1205):
        np.testing.assert_array_equal(m.heavy_hitters(table, k), np.sort(np.argsort(-(v ** 2))[:k]))


def test_the_summed_tables_of_a_cohort_choose_where_the_cohort_moved_most():
    """Ten clients each move their own two output rows of a dense layer (2-class shards at the last layer):
    the summed marginals pick those rows' heaviest inputs, which no client alone shows."""
    rng = np.random.default_rng(2)
    m = Marginals([(20, 50)])
    inputs = np.zeros(50)
    inputs[:5] = 1.0  # five inputs carry the signal
    tables = []
    for client in range(10):
        u = np.zeros((20, 50))
        u[2 * client:2 * client + 2] = rng.normal(size=(2, 1)) * inputs + 1e-3 * rng.normal(size=(2, 50))
        tables.append(m.sketch(u.ravel()))
    chosen = m.heavy_hitters(np.sum(tables, axis=0), 100)
    assert set((chosen % 50).tolist()) == set(range(5))  # every row's five signal inputs, nothing else


def test_ties_go_to_the_lower_position_and_an_all_zero_table_chooses_the_first_k():
    m = Marginals([(4, 4), (3,)])
    np.testing.assert_array_equal(m.heavy_hitters(np.zeros((1, m.cols)), 5), np.arange(5))
    table = np.zeros(m.cols)
    table[8:] = [1.0, 1.0, 1.0]  # the three bias entries tie
    np.testing.assert_array_equal(m.heavy_hitters(table, 2), [16, 17])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="positive sizes"):
        Marginals([(3, 0)])
    m = Marginals([(4, 4)])
    with pytest.raises(ValueError, match="expected a vector of length 16"):
        m.sketch(np.zeros(15))
    with pytest.raises(ValueError, match="expected 8 marginal cells"):
        m.heavy_hitters(np.zeros(7), 3)
    with pytest.raises(ValueError, match="NaN or Inf"):
        m.heavy_hitters(np.full(8, np.inf), 3)
    with pytest.raises(ValueError, match=r"k must be in \[1, 16\]"):
        m.heavy_hitters(np.zeros(8), 17)
    with pytest.raises(ValueError, match="tensor shapes cover 16 entries, the model has 17"):
        IndexPolicy("fresh", 17, 3, 0, summary="marginals", shapes=[(4, 4)])


def test_fresh_with_marginals_is_named_and_sized_by_its_tensors():
    policy = IndexPolicy("fresh", 1013, 10, 0, summary="marginals", shapes=SHAPES)
    assert policy.fresh and policy.name == "fresh(marginals)" and policy.shape == (1, Marginals(SHAPES).cols)
    assert policy.positions(0) == (None, 0)


def test_an_out_by_1_weight_is_a_vector_of_out_cells_not_a_matrix_of_out_plus_one():
    """A (10, 1) tensor has one column: its rows are its entries, so the table holds them as they are (10 cells
    masked and counted in bytes_up_sketch, not 11)."""
    m = Marginals([(10, 1), (3, 4)])
    assert m.cols == 10 + (3 + 4)
    vector = np.arange(1, 23, dtype=np.float32)
    np.testing.assert_allclose(m.sketch(vector)[0, :10], vector[:10] ** 2)


def test_a_negative_cell_from_rounding_counts_as_no_energy():
    """Two negative marginals (a summed zero rounded a level below) must not multiply into a positive estimate."""
    m = Marginals([(2, 2)])
    table = np.array([[-1e-3, 4.0, -1e-3, 4.0]])  # rows, then columns
    energy = m.estimate(table)
    assert (energy >= 0).all() and energy.tolist() == [0.0, 0.0, 0.0, 4.0]
    np.testing.assert_array_equal(m.heavy_hitters(table, 1), [3])
