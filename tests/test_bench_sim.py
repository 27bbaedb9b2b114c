"""experiments.bench_sim's measure of what evaluation adds to a round (no run: synthetic round times), a cell's
figures from its rows, the goals, and the run a repeated cell reports."""
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
        parts = row.train_s + row.server_s + row.client_work_s + row.evaluate_s + row.rest_s
        assert parts == pytest.approx(row.round_s)


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


def test_a_cells_figures_are_taken_from_its_rows_as_the_docstring_defines_them(monkeypatch):
    """round_s and its parts are medians over rounds 2..R; per-worker parts divide by the pool; peak_mb is the
    driver's peak plus one largest worker's per worker; state per client sampled (here all 4)."""
    import fl
    import pandas as pd

    from experiments.bench_sim import run_cell

    nan = float("nan")
    rows = pd.DataFrame({"num_workers": 2, "n_params": 100, "accuracy": [0.3, 0.5, 0.6], "t_setup": [5.0, 0, 0],
                         "t_round": [10.0, 2.0, 4.0], "t_train": [8.0, 2.0, 2.0], "t_broadcast": [1.0, 0.1, 0.3],
                         "t_aggregate": [0, 0.1, 0.1], "t_unmask": nan, "t_decode": [0, 0, 0.2],
                         "t_evaluate": [0.5, 0.2, 0.4], "t_evaluate_carried": [0, 0.2, 0], "t_sync": 0.2,
                         "t_encode": [0.2, 0.2, 0.4], "t_mask": nan, "driver_peak_mb": [100.0, 120.0, 110.0],
                         "worker_peak_mb": [50.0, 60.0, 55.0], "state_bytes": [0, 1e6, 2e6], "seed": 0})
    monkeypatch.setattr(fl, "compose", lambda overrides: overrides)
    monkeypatch.setattr(fl, "run", lambda cfg: rows)
    out = run_cell({"clients": 4, "model": "mlp_small", "secagg": "none", "compression": "topk", "seed": 0}, 3, "x")
    expected = {"round_s": 3.0, "train_s": 1.0, "overhead_share": 2 / 3, "server_s": 0.4, "evaluate_s": 0.35,
                "evaluate_share": 0.35 / 3, "evaluate_worker_s": 0.2, "client_work_s": 0.25, "rest_s": 1.0,
                "first_round_s": 15.0, "driver_peak_mb": 120.0, "worker_peak_mb": 60.0, "peak_mb": 240.0,
                "state_mb_per_client": 0.5, "accuracy": 0.6, "n_params": 100}
    assert {key: out[key] for key in expected} == pytest.approx(expected)


def test_state_per_client_divides_by_the_clients_sampled_under_partial_participation(monkeypatch):
    """2 of 100 clients a round for 3 rounds: at most 6 clients ever kept a residual, not 100."""
    import fl
    import pandas as pd

    from experiments.bench_sim import run_cell
    from fl.seeds import cohort

    rows = pd.DataFrame({"num_workers": 2, "n_params": 100, "accuracy": 0.5, "t_setup": 0.0, "t_round": 1.0,
                         "t_train": 0.5, "t_evaluate": 0.1, "t_broadcast": 0.1, "t_sync": 0.1,
                         "driver_peak_mb": 100.0, "worker_peak_mb": 50.0, "state_bytes": [0, 2e6, 3e6], "seed": 7},
                        index=range(3))
    monkeypatch.setattr(fl, "compose", lambda overrides: overrides)
    monkeypatch.setattr(fl, "run", lambda cfg: rows)
    cell = {"clients": 100, "clients_per_round": 2, "model": "mlp_small", "secagg": "none", "compression": "topk",
            "seed": 7}
    sampled = set().union(*(cohort(7, r, 100, 2) for r in range(3)))
    assert 2 <= len(sampled) <= 6
    assert run_cell(cell, 3, "x")["state_mb_per_client"] == pytest.approx(3.0 / len(sampled))
    assert run_cell(dict(cell, compression="none"), 3, "x")["state_mb_per_client"] == 0.0


def test_the_goals_are_judged_on_the_figures_they_name():
    import pandas as pd

    from experiments.bench_sim import goals

    table = pd.DataFrame([
        {"clients": 50, "model": "mlp_small", "secagg": "none", "compression": "none", "round_s": 0.08,
         "overhead_share": 0.2, "train_s": 0.064, "rest_s": 0.01, "server_s": 0.002, "evaluate_s": 0.001,
         "client_work_s": 0.003, "share_runs": "0.100 0.200 0.300", "peak_mb": float("nan")},
        {"clients": 1000, "model": "mlp_large", "secagg": "none", "compression": "topk", "round_s": 1.0,
         "peak_mb": 4200.0},
        {"clients": 1000, "model": "mlp_small", "secagg": "none", "compression": "none", "round_s": 1.0,
         "peak_mb": 1000.0}])
    lines = goals(table)
    assert "| N = 50, small MLP, no secagg: steady round <= 0.06 s | 0.080 s | **missed** |" in lines
    assert ("| ... framework's share of the round <= 25% | 20.0%, the median of 3 runs: 10.0%, 20.0%, 30.0% (training "
            "64.0 ms of 80.0 ms; around it Ray's calls and waiting 10.0 ms, the server 2.0 ms, evaluation 1.0 ms, a "
            "worker's encoding 3.0 ms) | met |") in lines
    assert ("| N = 1000 completes rounds, peak memory < 4 GB | 2 cells completed; largest peak 4.10 GB (mlp_large, "
            "none, topk) | **missed** |") in lines


def test_a_repeated_cell_reports_its_run_of_median_share_and_every_file_goes_to_out(tmp_path, monkeypatch):
    import json
    import subprocess
    from types import SimpleNamespace

    import pandas as pd

    from experiments import bench_sim

    cell = {"clients": 50, "model": "mlp_small", "secagg": "none", "compression": "none", "rounds": 30, "repeats": 3}
    shares = iter([0.3, 0.1, 0.2])

    def run(cmd, **_):
        share = next(shares)
        figures = {"clients": 50, "model": "mlp_small", "secagg": "none", "compression": "none", "rounds": 30,
                   "round_s": 0.04 + share, "overhead_share": share, "train_s": 0.03, "rest_s": 0.01, "server_s": 0.0,
                   "evaluate_s": 0.0, "client_work_s": 0.0}
        return SimpleNamespace(returncode=0, stdout="noise\n" + json.dumps(figures), stderr="")

    monkeypatch.setattr(bench_sim, "cells", lambda quick: iter([dict(cell)]))
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(bench_sim, "single_run", lambda: {
        "wall_s": 9.0, "startup_s": 6.0, "rounds_s": 1.0, "exit_s": 2.0, "startup_exit_per_rounds": 8.0,
        "peak_tree_pss_mb": 900.0, "processes": 4, "held_mb": {"driver": [300], "worker": [300, 300]},
        "peak_runs": [880, 900, 950]})
    monkeypatch.setattr(bench_sim, "sweep_rows", lambda quick: pd.DataFrame([
        {"sweep": "inline", "cells": 20, "equal_to_inline": 20, "wall_s": 10.0, "walls_s": "10.0", "vs_inline": 1.0,
         "per_cell_overhead_s": 0.1, "first_cell_s": 1.0, "nodes": 1},
        {"sweep": "ray", "cells": 20, "equal_to_inline": 20, "wall_s": 12.0, "walls_s": "12.0", "vs_inline": 1.2,
         "per_cell_overhead_s": 0.2, "first_cell_s": 4.0, "nodes": 1}]))
    table = bench_sim.main(["--quick", "--out", str(tmp_path / "b")])
    assert table.overhead_share.tolist() == [0.2] and table.share_runs.tolist() == ["0.100 0.200 0.300"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv", "b.md", "b_sweeps.csv"]
    md = (tmp_path / "b.md").read_text()
    assert "| ... framework's share of the round <= 25% | 20.0%, the median of 3 runs: 10.0%, 20.0%, 30.0%" in md
    assert "| quick preset swept with `backend=ray` <= 1.3x `backend=inline` | 1.20x" in md


def test_a_single_runs_start_up_exit_and_peak_are_taken_from_its_clock_and_done_json():
    """experiments.process_tree (bench_sim's single-run section): start-up is the start to the first round, exit
    the last round's end to the process's, both against the rounds' time; PSS in MiB, every process counted."""
    from experiments.process_tree import figures

    out = figures(100.0, 112.0, {"rounds_started_at": 106.0, "rounds_ended_at": 108.0},
                  {"total": 2**30, "by": {"worker": [2**28, 2**28], "driver (simulate.py)": [2**29]}})
    assert out == {"wall_s": 12.0, "startup_s": 6.0, "rounds_s": 2.0, "exit_s": 4.0, "startup_exit_per_rounds": 5.0,
                   "peak_tree_pss_mb": 1024.0, "processes": 3,
                   "held_mb": {"driver (simulate.py)": [512], "worker": [256, 256]}}


def test_the_process_trees_peak_is_judged_in_the_binary_units_it_is_measured_in():
    """PSS is read in MiB: the 1.2 GB bound is 1.2 GiB, as the 4 GB bound of the N = 1000 cells is 4 GiB, and the
    line gives the decimal bytes too (it compared MiB with 1200, a bound in neither unit)."""
    import pandas as pd

    from experiments.bench_sim import sweep_goals

    none = pd.DataFrame({"sweep": []})
    (line,) = sweep_goals({"peak_tree_pss_mb": 1210.0}, none)
    assert line.endswith("| 1210 MB (1.27 x 10^9 bytes) | met |")
    (line,) = sweep_goals({"peak_tree_pss_mb": 1229.0}, none)
    assert line.endswith("| **missed** |")
