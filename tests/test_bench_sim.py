"""experiments.bench_sim's measure of what evaluation adds to a round (no run: synthetic round times)."""
import numpy as np
import pytest

from experiments.bench_sim import evaluation_share


@pytest.mark.parametrize("carried", [True, False])
def test_evaluations_cost_is_recovered_whatever_the_cohorts_and_a_drift_between_runs(carried):
    rng = np.random.default_rng(0)
    plain = list(1.0 + 0.3 * rng.random(61) + 0.002 * np.arange(61))  # cohorts vary; the machine slows down
    working = 1 if carried else 0  # carried: round r + 1 does round r's evaluation
    evaluated = [p * 1.04 + 0.02 + (0.15 if r % 2 == working else 0.0) for r, p in enumerate(plain)]  # another day
    added, share, with_eval, error = evaluation_share(evaluated, plain, carried)
    assert added == pytest.approx(0.15, abs=0.01)
    rounds = [evaluated[r] for r in range(2, 60) if r % 2 == working]
    assert with_eval == pytest.approx(np.mean(rounds)) and share == pytest.approx(added / with_eval)
    assert 0 < error < 0.01  # the cohorts pair round by round: only the 4% drift is left to scatter


def test_the_standard_error_is_that_of_a_difference_of_two_means_and_shrinks_with_rounds():
    rng = np.random.default_rng(1)

    def errors(rounds):
        plain = [1.0] * rounds
        evaluated = [1.0 + (0.1 if r % 2 else 0.0) + rng.normal(0, 0.2) for r in range(rounds)]  # a noisy host
        added, share, with_eval, error = evaluation_share(evaluated, plain, carried=True)
        n = (rounds - 3) // 2  # rounds 2..R-2, half of them of each kind
        return added, error * with_eval, 0.2 * np.sqrt(2 / n)

    added, error, expected = errors(61)
    assert error == pytest.approx(expected, rel=0.3) and abs(added - 0.1) < 4 * expected
    assert errors(801)[1] < error / 2  # 4 times the rounds, about half the error


def test_the_fashion_mnist_rows_parts_and_overhead_share_are_taken_against_the_round_they_show():
    """fmnist_shares replaces a row's round_s with its paired figure: its overhead share and the rest of the
    round must follow, or the row's parts stop adding up to its round."""
    import pandas as pd

    from experiments.bench_sim import FMNIST_EVAL, FMNIST_RUNS, fmnist_shares

    plain = [1.0] * 41
    times = {"none": plain, "after": [1.0 + (0.2 if r % 2 == 0 else 0.0) for r in range(41)],
             "carried": [1.0 + (0.2 if r % 2 else 0.0) for r in range(41)]}
    table = pd.DataFrame([{"dataset": "fashion_mnist", "extra": FMNIST_EVAL["extra"] + x, "round_s": 1.1,
                           "train_s": 0.8, "server_s": 0.05, "client_work_s": 0.05, "evaluate_s": 0.1,
                           "overhead_share": 1 - 0.8 / 1.1, "rest_s": 0.1,
                           "round_times": " ".join(map(str, times[name]))} for name, x in FMNIST_RUNS.items()])
    fmnist_shares(table)
    for name in ("after", "carried"):
        row = table[table.extra == FMNIST_EVAL["extra"] + FMNIST_RUNS[name]].iloc[0]
        assert row.round_s == pytest.approx(1.2) and row.evaluate_s == pytest.approx(0.2)
        assert row.overhead_share == pytest.approx(1 - 0.8 / 1.2)
        assert row.train_s + row.server_s + row.client_work_s + row.evaluate_s + row.rest_s == pytest.approx(row.round_s)


def test_a_plain_cells_parts_of_a_round_are_numbers(tmp_path, ray_session):
    """A plain run's rows hold masking's columns empty (fl.run returns rounds.csv's rows): its server and client
    parts must count them as 0 s, not turn the whole part into NaN."""
    import math

    from experiments.bench_sim import run_cell

    out = run_cell({"clients": 4, "model": "mlp_small", "secagg": "none", "compression": "topk", "seed": 0}, 3,
                   str(tmp_path))
    for key in ("server_s", "client_work_s", "rest_s", "overhead_share", "evaluate_s"):
        assert math.isfinite(out[key]), (key, out[key])
    assert out["server_s"] > 0 and out["client_work_s"] > 0


def test_a_cells_per_worker_parts_divide_by_the_runs_pool_not_the_machines_cores(tmp_path, monkeypatch):
    """Client seconds are summed over the workers of the run's pool (one per core it may use: a SLURM job's or a
    container's share), which the rows' num_workers records; a machine with more cores must not shrink them."""
    import os

    import fl
    from experiments.bench_sim import run_cell
    from fl.results import read_rows

    compose = fl.compose
    monkeypatch.setattr(fl, "compose", lambda o: compose([x for x in o if x != "backend=ray"] +
                                                         ["backend=inline", "ray.num_workers=2"]))
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # the node's cores; the run may use fewer
    out = run_cell({"clients": 4, "model": "mlp_small", "secagg": "none", "compression": "none", "seed": 0}, 3,
                   str(tmp_path))
    rows = read_rows(next(tmp_path.glob("*/rounds.csv")))
    assert (rows["num_workers"] == 2).all()
    assert out["train_s"] == pytest.approx((rows["t_train"] / rows["num_workers"]).iloc[1:].median())
