"""The low-rank estimates of experiments.index_sets: exact where the energies have that rank, the rank-one sketch
is `marginals`' estimate, and the cells counted are the sketch's; a third exchange at `marginals`' candidates
picks the top k of the exact energies among them; a shared subspace projects each matrix and sends biases whole;
the error and movement of per-client and shared sets, the cells each choice counts, the table's columns."""
import numpy as np
import pytest

from compression.marginals import Marginals
from experiments.index_sets import (CandidateEnergy, LowRankEnergy, SharedSubspace, choices, movement_sent,
                                    relative_error)

SHAPES = [(12, 3, 5), (12,), (7, 12), (7,)]  # a conv-like tensor (12 x 15), a bias, a dense layer, a bias
LENGTH = 12 * 15 + 12 + 7 * 12 + 7


def _energies_of_rank(rank: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = []
    for shape in SHAPES:
        if len(shape) == 1:
            parts.append(rng.random(shape[0]))
        else:
            m, n = shape[0], int(np.prod(shape[1:]))
            parts.append((rng.random((m, rank)) @ rng.random((rank, n))).ravel())
    return np.concatenate(parts)


def test_an_energy_of_the_estimates_rank_is_recovered_and_its_top_k_found():
    energy = _energies_of_rank(3)
    k = 40
    want = np.sort(np.argsort(-energy)[:k])
    for estimator in (LowRankEnergy(SHAPES, 3), LowRankEnergy(SHAPES, 3, 6)):
        np.testing.assert_allclose(estimator.estimate(energy), energy, rtol=1e-8, atol=1e-10)
        np.testing.assert_array_equal(estimator.heavy_hitters(energy, k), want)
    # rank 2 cannot hold a rank-3 matrix: the estimate differs
    assert not np.allclose(LowRankEnergy(SHAPES, 2).estimate(energy), energy, rtol=1e-3)


def test_the_rank_one_sketch_from_ones_is_the_marginals_estimate():
    energy = _energies_of_rank(4, seed=1)
    marginals = Marginals(SHAPES)
    np.testing.assert_allclose(LowRankEnergy(SHAPES, 1, 1).estimate(energy),
                               marginals.estimate(marginals.sketch(np.sqrt(energy))), rtol=1e-6)


def test_the_sketch_counts_its_cells_and_the_svd_bound_none():
    # 12 x 15: rank 5 x 12 rows + 10 x 15 columns; 7 x 12: 5 x 7 + 7 x 12 (Psi capped at 7 rows); biases 12 + 7
    assert LowRankEnergy(SHAPES, 5, 10).cols == (5 * 12 + 10 * 15) + 12 + (5 * 7 + 7 * 12) + 7
    assert LowRankEnergy(SHAPES, 1, 1).cols == Marginals(SHAPES).cols
    assert LowRankEnergy(SHAPES, 5).cols is None
    assert LowRankEnergy(SHAPES, 2, 4).length == LENGTH


def test_a_shared_subspace_sends_a_sum_of_its_rank_whole_and_counts_both_exchanges():
    total = _energies_of_rank(2, seed=2)  # each matrix of rank 2
    for basis in ("power", "sum", "movement"):
        shared = SharedSubspace(SHAPES, 2, basis).fit([total / 2, total / 2])
        np.testing.assert_allclose(shared(total), total, rtol=1e-9, atol=1e-12)
        assert relative_error([total / 2, total / 2], shared, 1) < 1e-18
    one = SharedSubspace(SHAPES, 1, "sum").fit([total])
    assert 0 < relative_error([total], one, 1) < 1 and 0 < movement_sent([total], one, 1) < 1
    # a projection: applied twice it changes nothing, and it sends no more than the whole
    rng = np.random.default_rng(3)
    u = rng.standard_normal(LENGTH)
    np.testing.assert_allclose(one(one(u)), one(u), rtol=1e-9, atol=1e-12)
    assert np.sum(one(u) ** 2) <= np.sum(u ** 2)
    assert one(u)[12 * 15:12 * 15 + 12].tolist() == u[12 * 15:12 * 15 + 12].tolist()  # a bias goes whole
    assert SharedSubspace(SHAPES, 2).numbers == 2 * (12 + 15) + 12 + 2 * (7 + 12) + 7


def test_the_movement_basis_sends_the_most_of_the_clients_movement_and_the_sum_basis_the_least_error():
    rng = np.random.default_rng(4)
    updates = [rng.standard_normal(LENGTH) * rng.random(LENGTH) for _ in range(5)]
    fitted = {b: SharedSubspace(SHAPES, 2, b).fit(updates) for b in ("power", "sum", "movement")}
    sent = {b: movement_sent(updates, f, 1) for b, f in fitted.items()}
    error = {b: relative_error(updates, f, 1) for b, f in fitted.items()}
    assert sent["movement"] >= max(sent.values()) - 1e-12 and error["sum"] <= min(error.values()) + 1e-12


def test_a_third_exchange_picks_the_top_k_of_the_exact_energies_among_the_marginals_candidates():
    """Candidates: the top c k of the rank-one estimate; the set: the top k of their exact energies. With every
    entry a candidate that is the exact top k, which the rank-one estimate of a rank-three energy misses."""
    energy = _energies_of_rank(3, seed=5)
    values = np.sqrt(energy)
    k, marginals = 40, Marginals(SHAPES)
    exact = np.sort(np.argsort(-energy)[:k])
    everything = CandidateEnergy(SHAPES, k, LENGTH)
    assert everything.cols == marginals.cols + LENGTH
    np.testing.assert_array_equal(everything.heavy_hitters(everything.sketch(values), k), exact)
    assert not np.array_equal(marginals.heavy_hitters(marginals.sketch(values), k), exact)
    two = CandidateEnergy(SHAPES, k, 2)
    chosen = two.heavy_hitters(two.sketch(values), k)
    candidates = np.argsort(-marginals.estimate(marginals.sketch(values)), kind="stable")[:2 * k]
    assert two.cols == marginals.cols + 2 * k and set(chosen) <= set(candidates)
    np.testing.assert_array_equal(chosen, np.sort(candidates[np.argsort(-energy[candidates], kind="stable")[:k]]))


def test_the_error_of_the_sum_and_the_movement_sent_per_client_and_at_a_shared_set():
    """Per-client top-k sums each client's own k (two clients' picks of one entry add up); a shared set keeps the
    sum at its positions; movement sent is the share of the clients' squares at what each sends."""
    updates = [np.array([3.0, 0, 1, 0]), np.array([2.0, 1, 0, 0])]  # the sum: [5, 1, 1, 0], |U|^2 = 27
    assert relative_error(updates, None, 1) == pytest.approx(2 / 27)  # both send entry 0: 3 + 2
    assert relative_error(updates, np.array([2]), 1) == pytest.approx(26 / 27)
    assert movement_sent(updates, None, 1) == pytest.approx((9 + 4) / (10 + 5))
    assert movement_sent(updates, np.array([2]), 1) == pytest.approx(1 / 15)


def test_each_choice_counts_the_cells_of_its_masked_summary():
    rng = np.random.default_rng(6)
    updates = [rng.standard_normal(LENGTH).astype(np.float32) for _ in range(3)]
    found = choices(updates, SHAPES, 10)
    cells = {name: c for name, (_, c) in found.items()}
    assert cells["fresh: marginals (the default)"] == Marginals(SHAPES).cols
    assert cells["top-k of the sum (`exact`, a dense summary)"] == LENGTH
    assert cells["per-client top-k (no shared set)"] is None
    power = {name: c for name, c in cells.items() if "one power step" in name}
    # P = M Q: m x r for each matrix (12 x 15 and 7 x 12), the first of the two exchanges
    assert sorted(power.values()) == [1 * (12 + 7), 2 * (12 + 7), 4 * (12 + 7)]
    assert all(len(positions) == 10 for positions, _ in found.values() if isinstance(positions, np.ndarray))


def test_the_table_shows_each_partitions_mean_over_the_rounds_measured_under_its_column(tmp_path, monkeypatch):
    import pandas as pd

    from experiments import index_sets

    def measure(scheme, ratio, seed):
        return pd.DataFrame([{"partition": scheme, "round": r, "selection": name, "summary_cells": cells,
                              "relative_error": base + r / 100 + (0.5 if scheme == "shards" else 0),
                              "movement_sent": base / 10 + r / 1000 + (0.05 if scheme == "shards" else 0)}
                             for r in (0, 2) for name, cells, base in (("a set", 1234, 0.2), ("no set", None, 0.3))])

    monkeypatch.setattr(index_sets, "measure", measure)
    index_sets.main(["--out", str(tmp_path / "t")])
    lines = (tmp_path / "t.md").read_text().splitlines()
    # error: IID, shards; movement: IID, shards; each the mean of rounds 0 and 2
    assert "| a set | 1,234 | 0.210 | 0.710 | 0.021 | 0.071 |" in lines
    assert "| no set |  | 0.310 | 0.810 | 0.031 | 0.081 |" in lines
    assert len(pd.read_csv(tmp_path / "t.csv")) == 8
