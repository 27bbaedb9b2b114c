"""experiments.grid's summary: each row against the dense run of its own partition, and what a table says about
seeds and hosts."""
import pandas as pd
import pytest

from experiments import grid, hosts


def _runs(rows):
    return pd.DataFrame([{"setting": setting, "seed": seed, "partition": partition, "host": host,
                          "compression": "none" if dense else "topk", "ratio": 1.0 if dense else 0.01,
                          "secagg": "none", "policy_ran": "dense" if dense else "per-client", "accuracy": accuracy,
                          "bytes_up": up, "bytes_down": 1e6, "s_per_round": 1.0}
                         for setting, seed, partition, host, dense, accuracy, up in rows])


def test_a_shards_row_is_compared_with_shards_dense_not_with_iid_dense(tmp_path):
    runs = _runs([("iid: dense", 0, "iid", "Xeon", True, 0.85, 4e6),
                  ("shards: dense", 0, "shards", "Xeon", True, 0.75, 4e6),
                  ("iid: top-k", 0, "iid", "Xeon", False, 0.80, 1e5),
                  ("shards: top-k", 0, "shards", "EPYC", False, 0.60, 2e5)])
    table = grid.summarize(runs).set_index("setting")
    assert table.loc["shards: dense", "accuracy_vs_dense"] == 0
    assert table.loc["shards: top-k", "accuracy_vs_dense"] == pytest.approx(-0.15)  # not -0.25 (against IID dense)
    assert table.loc["iid: top-k", "accuracy_vs_dense"] == pytest.approx(-0.05)
    assert table.loc["shards: top-k", "upload_vs_dense"] == pytest.approx(0.05)
    md = grid.write(table.reset_index(), str(tmp_path / "t"), "t", "cmd", "d")
    line = next(x for x in md.splitlines() if x.startswith("| shards: top-k"))
    # one seed: no spread shown, not ± 0.000; upload and download in MB (1e6 bytes), each in its own column
    assert line == ("| shards: top-k | topk | 0.01 | none | per-client | 1 | 0.600 | -0.150 | 0.20 | 0.050x | 1.00 "
                    "| 1.00 | A |")
    assert "Hosts (" in md and "A = EPYC; B = Xeon" in md


def test_two_seeds_show_their_spread_and_a_partition_without_dense_is_refused():
    runs = _runs([("dense", s, "iid", "Xeon", True, 0.8 + 0.02 * s, 4e6) for s in (0, 1)])
    table = grid.summarize(runs)
    assert grid.accuracy_cell(*table[["accuracy_mean", "accuracy_std", "seeds"]].iloc[0]) == "0.810 ± 0.014"
    assert (table.bytes_up_mb[0], table.bytes_down_mb[0]) == (4.0, 1.0)  # a run's bytes, the mean over seeds
    with pytest.raises(ValueError, match="one dense setting per partition"):
        grid.summarize(_runs([("dense", 0, "iid", "Xeon", True, 0.8, 4e6),
                              ("shards: top-k", 0, "shards", "Xeon", False, 0.6, 1e5)]))


def test_upload_is_compared_with_the_dense_run_of_its_own_partition():
    runs = _runs([("iid: dense", 0, "iid", "Xeon", True, 0.85, 4e6),
                  ("shards: dense", 0, "shards", "Xeon", True, 0.75, 8e6),
                  ("iid: top-k", 0, "iid", "Xeon", False, 0.80, 1e5),
                  ("shards: top-k", 0, "shards", "Xeon", False, 0.60, 2e5)])
    table = grid.summarize(runs).set_index("setting")
    assert table.loc["shards: top-k", "upload_vs_dense"] == pytest.approx(0.025)  # 2e5 / 8e6, not / 4e6
    assert table.loc["iid: top-k", "upload_vs_dense"] == pytest.approx(0.025)


def test_a_grid_line_holds_the_runs_byte_totals_and_the_median_round_after_the_first(monkeypatch):
    """Bytes are the run's totals (every round, both directions); seconds per round leave round 0 (start-up) out."""
    rows = pd.DataFrame({"partition": "iid", "env_cpu": "Xeon", "compression": "topk", "ratio": 0.1, "secagg": "none",
                         "index_policy": "per-client", "accuracy": [0.5, 0.9, 0.7], "bytes_up": [10, 20, 30],
                         "bytes_down": [100, 200, 300], "t_round": [50.0, 1.0, 3.0]})
    from omegaconf import OmegaConf

    folders = []
    monkeypatch.setattr(grid.fl, "compose", lambda overrides: OmegaConf.create({"results": {"dir": "results/runs"}}))
    monkeypatch.setattr(grid, "run_when_free", lambda cfg: folders.append(cfg.results.dir) or rows)
    (line,) = grid.run_grid([("top-k", ["compression.ratio=0.1"])], [0], runs_dir="runs/alpha=0.1,b").to_dict("records")
    assert folders == ["runs/alpha=0.1,b"]  # as given: an override would not parse it
    # the final accuracy, not the best
    assert (line["accuracy"], line["bytes_up"], line["bytes_down"], line["s_per_round"]) == (0.7, 60, 600, 2.0)
    assert line["host"] == "Xeon"
    rows = rows.head(1)  # a one-round run: its only round is its seconds per round
    assert grid.run_grid([("top-k", ["compression.ratio=0.1"])], [0]).s_per_round.tolist() == [50.0]


def test_hosts_pooled_on_one_line_get_each_host_its_own_letter():
    tag = hosts.letters(["Xeon + EPYC", "Xeon", "ARM"])
    assert tag == {"ARM": "A", "EPYC": "B", "Xeon": "C"}
    assert hosts.lettered(hosts.pooled(["Xeon", "EPYC", "Xeon"]), tag) == "B + C"


def test_a_masked_dense_setting_is_compared_with_the_unmasked_dense_run_and_two_dense_baselines_are_refused():
    """Dense + dh (no compression) is a setting of its own, as in the README's table, not a second baseline."""
    runs = _runs([("dense", 0, "iid", "Xeon", True, 0.85, 4e6), ("dense + dh", 0, "iid", "Xeon", True, 0.84, 2e6)])
    runs.loc[1, "secagg"] = "dh"
    table = grid.summarize(runs).set_index("setting")
    assert table.loc["dense + dh", "upload_vs_dense"] == pytest.approx(0.5)
    assert table.loc["dense + dh", "accuracy_vs_dense"] == pytest.approx(-0.01)
    with pytest.raises(ValueError, match="one dense setting per partition"):
        grid.summarize(_runs([("dense", 0, "iid", "Xeon", True, 0.85, 4e6), ("dense again", 0, "iid", "Xeon", True,
                                                                                0.84, 4e6)]))


def test_rows_kept_before_the_cpu_was_recorded_name_an_unknown_host():
    assert hosts.of(pd.DataFrame({"round": [0]})) == hosts.UNKNOWN
    assert hosts.of(pd.DataFrame({"env_cpu": [float("nan")]})) == hosts.UNKNOWN  # a blank cell
    assert hosts.of(pd.DataFrame({"env_cpu": ["Xeon"]})) == "Xeon"


def test_a_run_whose_policy_is_blank_is_still_a_line_not_dropped():
    """Rows written before a column existed read it as blank: groupby's default would drop the run silently."""
    runs = _runs([("dense", 0, "iid", "Xeon", True, 0.85, 4e6), ("top-k", 0, "iid", "Xeon", False, 0.80, 1e5)])
    runs.loc[runs.setting == "top-k", "policy_ran"] = None
    table = grid.summarize(runs).set_index("setting")
    assert list(table.index) == ["dense", "top-k"] and table.loc["top-k", "seeds"] == 1
