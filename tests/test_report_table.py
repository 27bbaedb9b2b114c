"""experiments.report: the table's figures from small runs written here, each checked against a value worked out
by hand (a mean, a spread, a count, a baseline or a cell's format that a committed table would publish)."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from experiments import report, report_plots


def _rows(run_id, seed=0, accuracies=(0.6, 0.7), **over):
    """A plain top-k run as fl.results writes it (the columns the report reads): 20,000 bytes up a round from the
    cohort, 100 clients."""
    return [dict(run_id=run_id, seed=seed, env="cpu", dataset="fashion_mnist", partition="shards", model="lenet",
                 n_params=10, compression="topk", ratio=0.1, error_feedback=True, secagg="none",
                 index_policy="per-client", field_bits=np.nan, round=r, accuracy=a, num_clients=100,
                 bytes_up=20000, bytes_up_per_client=400, bytes_down_per_client=2500,
                 **{s: 0.1 for s in report.STAGES}, t_round=1.0) | over for r, a in enumerate(accuracies)]


DENSE = dict(compression="none", ratio=1.0, error_feedback=False, index_policy="dense", bytes_up_per_client=4000,
             bytes_down_per_client=5000)
MASKED = dict(secagg="dh", index_policy="fresh(marginals)", field_bits=20)


def _config(secagg="none", **fl):
    return {"seed": 0, "backend": "inline", "fl": {"lr": 0.1, "rounds": 2, **fl},
            "compression": {"index_policy": "fresh", "sketch_quant_bits": None},
            "secagg": {"name": secagg, "dropout": 0.0, "quant_bits": 16}}


def _write_run(root, name, rows, config):
    run = root / name
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "rounds.csv", index=False)
    (run / "config.json").write_text(json.dumps(config))
    (run / "done.json").write_text(json.dumps({"run_id": name, "rounds": len(rows)}))


def _table(tmp_path, target=0.6):
    return report.table(report.per_run(report.load([str(tmp_path)])[0], target))


def test_rounds_to_target_is_the_mean_over_the_runs_that_reached_it_counted_after_the_slash():
    """Seed 0 reaches 0.7 exactly in round 2, seed 1 in round 3, seed 2 never: 2.5 rounds over 2 runs, and the
    upload until then (2 and 3 rounds of 200 bytes per client of the population) averaged over those two."""
    rows = pd.DataFrame(_rows("a", 0, (0.5, 0.7, 0.8)) + _rows("b", 1, (0.5, 0.6, 0.75))
                        + _rows("c", 2, (0.5, 0.6, 0.65)))
    t = report.table(report.per_run(rows, 0.7))
    assert (t["rounds_to_target"].iloc[0], t["reached"].iloc[0]) == (2.5, 2)
    assert t["upload_to_target"].iloc[0] == pytest.approx(500)
    line = report.markdown(t, [], 0.7, "cmd").splitlines()[-1]
    assert line.endswith("| 2.5 / 2 | 500 |")


def test_accuracy_is_each_runs_last_evaluated_round_averaged_over_seeds_not_its_best_nor_the_median():
    rows = pd.DataFrame(_rows("a", 0, (0.8, 0.7, 0.6)) + _rows("b", 1, (0.5, 0.7, np.nan))
                        + _rows("c", 2, (0.5, 0.6, 0.95)))
    runs = report.per_run(rows, 0.9).set_index("seed")
    assert runs["final_accuracy"].tolist() == [0.6, 0.7, 0.95]  # seed 0's best was 0.8; seed 1's last round blank
    t = report.table(runs.reset_index())
    assert t["accuracy"].iloc[0] == pytest.approx(0.75)


def test_per_round_figures_are_means_over_rounds_then_over_seeds():
    """A run's bytes and lost clients per round average every round (a blank count is 0), the line's average its
    runs; round trips count a masked round's protocol steps."""
    steps = {c: 0.1 for c in report.STEPS}
    a = pd.DataFrame(_rows("a", 0, (0.6, 0.7, 0.7), **MASKED, **steps)).assign(
        bytes_up_per_client=[1000, 2000, 6000], dropped=[2, np.nan, 1], t_round=1.0)
    b = pd.DataFrame(_rows("b", 1, (0.6, 0.7, 0.7), **MASKED, **steps)).assign(dropped=3.0, t_round=3.0)
    b[["t_step_masked_sketch", "t_step_unmask_sketch"]] = np.nan  # 4 exchanges a round, not 6
    runs = report.per_run(pd.concat([a, b], ignore_index=True), 0.9).set_index("seed")
    assert runs.loc[0, "up_per_client"] == 3000 and runs.loc[0, "dropped_per_round"] == 1.0
    t = report.table(runs.reset_index()).iloc[0]
    assert (t["round_s"], t["round_trips"], t["dropped_per_round"]) == (2.0, 5.0, 2.0)


def test_a_line_counts_its_runs_whose_final_model_collapsed_and_the_column_shows_only_where_one_did():
    """Seed 0 ends collapsed (one class for 99.5% of the images, logits varying by 0.002); seed 1 collapsed in its
    first round only; seed 2 ends with one class for every image but logits that vary (alive); seed 3's rows predate
    the columns. Rows of the final round decide, and a line none of whose runs knows is blank."""
    down, live = dict(top_class_share=0.995, logit_std=0.002), dict(top_class_share=0.3, logit_std=1.5)
    runs = [pd.DataFrame(_rows(str(s), s)).assign(**{k: [first[k], last[k]] for k in down})
            for s, (first, last) in enumerate([(live, down), (down, live), (live, dict(down, logit_std=0.05))])]
    rows = pd.concat([*runs, pd.DataFrame(_rows("3", 3))], ignore_index=True)
    per_run = report.per_run(rows, 0.9).set_index("seed")["ended_collapsed"]
    assert per_run[[0, 1, 2]].tolist() == [1.0, 0.0, 0.0] and np.isnan(per_run[3])
    old = report.table(report.per_run(pd.DataFrame(_rows("3", 3)), 0.9))
    assert np.isnan(old["ended_collapsed"].iloc[0]) and "ended collapsed" not in report.markdown(old, [], 0.9, "cmd")
    t = report.table(report.per_run(rows, 0.9))
    assert t["ended_collapsed"].iloc[0] == 1
    text = report.markdown(t, [], 0.9, "cmd")
    assert "Ended collapsed: runs whose final model" in text
    header, line = text.splitlines()[-3], text.splitlines()[-1]
    cells = [c.strip() for c in line.split("|")]
    assert cells[[c.strip() for c in header.split("|")].index("ended collapsed")] == "1"
    alive = report.table(report.per_run(pd.concat(runs[1:], ignore_index=True), 0.9))
    assert alive["ended_collapsed"].iloc[0] == 0 and "ended collapsed" not in report.markdown(alive, [], 0.9, "cmd")


def test_rows_out_of_order_are_read_by_round():
    rows = pd.DataFrame(_rows("a", 0, (0.5, 0.6, 0.7))).iloc[::-1]
    run = report.per_run(rows, 0.6).iloc[0]
    assert (run["final_accuracy"], run["rounds_to_target"]) == (0.7, 2)


def test_a_lines_figures_against_dense_and_their_cells(tmp_path):
    """Up and down each against the dense baseline's own direction; Δ signed; the cells as the table prints
    them."""
    _write_run(tmp_path, "d", _rows("d", 0, (0.6, 0.7), **DENSE), _config())
    _write_run(tmp_path, "k", _rows("k", 0, (0.6, 0.75)), _config())
    t = _table(tmp_path)
    line = t[t["compression"] == "topk"].iloc[0]
    assert (line["up_vs_dense"], line["down_vs_dense"]) == (0.1, 0.5)
    assert line["accuracy_change"] == pytest.approx(0.05)
    md = report.markdown(t, [], 0.6, "cmd").splitlines()
    assert "| accuracy | last 5 | Δ vs dense | up B/client | up x dense | down B/client | down x dense | encode s " \
           "| decode s | mask s | round s | host |" in md[-4]
    assert md[-1] == ("| cpu | fashion_mnist (shards) | lenet | 10 | topk | 0.1 | on | none | per-client |  | 1 "
                      "| 0.750 | 0.675 | +0.050 | 400 | 0.1000 | 2,500 | 0.5000 | 0.1000 | 0.1000 | 0.1000 | 1.000 "
                      "| A | 1.0 / 1 | 200 |")


def test_a_delta_over_other_seeds_than_its_baselines_names_the_baselines_seeds(tmp_path):
    """Dense ran seeds 0-2 and 4, top-k seeds 0-2: Δ is still the difference of the two means, but its cell
    names the dense seeds and the notes say to compare seed by seed; with the seed sets equal neither appears."""
    for seed in (0, 1, 2, 4):
        _write_run(tmp_path, f"d{seed}", _rows(f"d{seed}", seed, (0.6, 0.7 + seed / 50), **DENSE), _config())
    for seed in (0, 1, 2):
        _write_run(tmp_path, f"k{seed}", _rows(f"k{seed}", seed, (0.6, 0.75)), _config())
    t = _table(tmp_path)
    line = t[t["compression"] == "topk"].iloc[0]
    assert (line["seed_set"], line["dense_seed_set"]) == ("0-2", "0-2, 4")
    assert line["accuracy_change"] == pytest.approx(0.75 - 0.735)  # 0.70, 0.72, 0.74, 0.78
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| +0.015 (dense: seeds 0-2, 4) | 400 |" in md and "compare such lines seed by seed" in md
    assert md.count("(dense: seeds") == 1  # the dense line's own Δ is over its own seeds
    for seed in (4,):
        _write_run(tmp_path, f"k{seed}", _rows(f"k{seed}", seed, (0.6, 0.75)), _config())
    md = report.markdown(_table(tmp_path), [], 0.6, "cmd")
    assert "(dense: seeds" not in md and "seed by seed" not in md
    assert report.number_range(pd.Series([3, 0, 1, 1, 2, 7, 9, 8])) == "0-3, 7-9"
    assert report.number_range([0, 1, 4]) == "0, 1, 4"


def test_the_dense_baseline_is_plain_dense_of_the_lines_own_environment_and_length_never_masked_dense(tmp_path):
    """Masked dense (same base config) sorts before plain dense, cpu before gpu, 2 rounds before 3: taking the
    first dense line alike would compare with the wrong one."""
    _write_run(tmp_path, "d", _rows("d", 0, (0.6, 0.8), **DENSE), _config())
    _write_run(tmp_path, "md", _rows("md", 0, (0.6, 0.7), **DENSE, secagg="dh", field_bits=20), _config("dh"))
    _write_run(tmp_path, "k", _rows("k", 0, (0.6, 0.75)), _config())
    _write_run(tmp_path, "mk", _rows("mk", 0, (0.6, 0.72), **MASKED), _config("dh"))
    _write_run(tmp_path, "g", _rows("g", 0, (0.6, 0.9), **DENSE, env="gpu"), _config())
    _write_run(tmp_path, "gk", _rows("gk", 0, (0.6, 0.85), env="gpu"), _config())
    _write_run(tmp_path, "d3", _rows("d3", 0, (0.5, 0.6, 0.6), **DENSE), _config(rounds=3))
    _write_run(tmp_path, "k3", _rows("k3", 0, (0.5, 0.6, 0.65)), _config(rounds=3))
    t = _table(tmp_path)
    change = {(e, c, s, n): x for e, c, s, n, x in
              t[["env", "compression", "secagg", "rounds", "accuracy_change"]].itertuples(index=False)}
    assert change[("cpu", "topk", "none", 2)] == pytest.approx(-0.05)
    assert change[("cpu", "topk", "dh", 2)] == pytest.approx(-0.08)
    assert change[("cpu", "none", "dh", 2)] == pytest.approx(-0.1)
    assert change[("gpu", "topk", "none", 2)] == pytest.approx(-0.05)
    assert change[("cpu", "topk", "none", 3)] == pytest.approx(0.05)


def test_the_only_dense_line_is_the_baseline_where_a_config_lacks_a_key_with_no_value_before_it(tmp_path):
    """A key newer than the dense run's config.json and unknown to fl.results.NEUTRAL: no line is alike, the
    only dense line still is the baseline."""
    _write_run(tmp_path, "d", _rows("d", 0, (0.6, 0.8), **DENSE), _config())
    _write_run(tmp_path, "k", _rows("k", 0, (0.6, 0.75)), _config(new_knob=3))
    line = _table(tmp_path).set_index("compression").loc["topk"]
    assert line["accuracy_change"] == pytest.approx(-0.05) and line["up_vs_dense"] == pytest.approx(0.1)


def test_a_summary_at_the_values_bits_pools_with_the_default_and_a_masking_key_unmasked_runs_differ_in_is_not_named(
        tmp_path):
    """sketch_quant_bits equal to secagg.quant_bits is the default (null); secagg.quant_bits, inert without
    masking, split no unmasked pool and is not named on masked lines that all ran at one width."""
    for name, seed, bits in (("a", 0, None), ("b", 1, 16)):
        config = _config("dh")
        config["compression"]["sketch_quant_bits"] = bits
        _write_run(tmp_path, name, _rows(name, seed, **MASKED), {**config, "seed": seed})
    for name, seed, bits in (("p", 0, 16), ("q", 1, 12)):
        config = _config()
        config["secagg"]["quant_bits"] = bits
        _write_run(tmp_path, name, _rows(name, seed), {**config, "seed": seed})
    t = _table(tmp_path)
    assert t["other"].tolist() == ["", ""] and t["seeds"].tolist() == [2, 2]


def test_a_key_is_named_as_its_value_reads_and_only_among_runs_of_one_length(tmp_path):
    """A text value without JSON quotes; runs of another length are never pooled with a run, so a key they
    differ in is not named."""
    _write_run(tmp_path, "a", _rows("a", 0), _config(optimizer="sgd"))
    _write_run(tmp_path, "b", _rows("b", 0), _config(optimizer="adam"))
    _write_run(tmp_path, "c", _rows("c", 0, (0.5, 0.6, 0.7)), _config(rounds=3, lr=0.05, optimizer="sgd"))
    _write_run(tmp_path, "d", _rows("d", 0, (0.5, 0.6, 0.7, 0.8)), _config(rounds=4, lr=0.1, optimizer="sgd"))
    rows, _ = report.load([str(tmp_path)])
    assert rows.groupby("run_id")["other"].first().to_dict() == {
        "a": "fl.optimizer=sgd", "b": "fl.optimizer=adam", "c": "", "d": ""}
    report.main([str(tmp_path), "--out", str(tmp_path / "out")])
    csv = pd.read_csv(tmp_path / "out" / "topk_table.csv", keep_default_na=False)
    assert sorted(csv["other"]) == ["", "", "fl.optimizer=adam", "fl.optimizer=sgd"] and "base" not in csv


def test_a_codec_option_given_to_some_runs_only_is_named_and_one_given_at_its_default_pools(tmp_path):
    """qsgd's levels given as 4 to one run and left to the codec (16) in another were pooled as seeds of one line,
    the key being in one config.json only; given as 16 (or 16.0) it is the default and pools with the run that left
    it out."""
    qsgd = dict(compression="qsgd", error_feedback=False)
    for name, seed, options in (("a", 0, {"levels": 4}), ("b", 1, {}), ("c", 2, {"levels": 16.0})):
        config = _config()
        config["compression"] |= {"name": "qsgd", "options": options}
        _write_run(tmp_path, name, _rows(name, seed, **qsgd), {**config, "seed": seed})
    t = _table(tmp_path)
    assert sorted(zip(t["other"], t["seeds"])) == [("compression.options.levels=16", 2),
                                                    ("compression.options.levels=4", 1)]


def test_a_run_without_a_config_is_left_out_of_the_comparison_not_all_keys(tmp_path):
    """An old run with no config.json emptied the keys compared: runs at lr 0.1 and 0.05 and the old one were pooled
    as three seeds of one line. Now the two are named apart, and the old one, named by nothing, stands alone."""
    _write_run(tmp_path, "a", _rows("a", 0), _config(lr=0.1))
    _write_run(tmp_path, "b", _rows("b", 1), _config(lr=0.05))
    _write_run(tmp_path, "c", _rows("c", 2), _config(lr=0.1))
    (tmp_path / "c" / "config.json").unlink()
    t = _table(tmp_path)
    assert sorted(zip(t["other"], t["seeds"])) == [("", 1), ("fl.lr=0.05", 1), ("fl.lr=0.1", 1)]


def test_each_unfinished_run_is_listed_once_with_its_own_runs_error(tmp_path):
    """A run that crashed mid-way leaves rows and its failed-<run_id>.txt; an earlier attempt's note in the same
    folder (here the newer file) is not these rows' error, which were killed or are still running. One that failed
    before its first round leaves only notes, and rows of a header alone name no run: the latest note since."""
    _write_run(tmp_path, "done", _rows("done", 0), _config())
    crashed, killed, early, header = (tmp_path / name for name in ("crashed", "killed", "early", "header"))
    for folder in (crashed, killed, early, header):
        folder.mkdir()
    pd.DataFrame(_rows("crashed", 1)).to_csv(crashed / "rounds.csv", index=False)
    pd.DataFrame(_rows("killed", 2)).to_csv(killed / "rounds.csv", index=False)
    (header / "rounds.csv").write_text("run_id,seed\n")
    os.utime(header / "rounds.csv", (1500, 1500))
    for folder, name, when, text in ((crashed, "failed-crashed.txt", 1000, "its error"),
                                     (crashed, "failed-before.txt", 2000, "an earlier attempt's error"),
                                     (killed, "failed-before.txt", 2000, "an earlier attempt's error"),
                                     (early, "failed-2.txt", 1000, "older error"),
                                     (early, "failed-1.txt", 2000, "no data"),
                                     (header, "failed-0.txt", 1000, "before the header"),
                                     (header, "failed-3.txt", 2000, "after the header")):
        (folder / name).write_text(text)
        os.utime(folder / name, (when, when))
    _, incomplete = report.load([str(tmp_path)])
    assert incomplete == [crashed / "rounds.csv", header / "rounds.csv", killed / "rounds.csv", early / "rounds.csv"]
    md = report.markdown(_table(tmp_path), incomplete, 0.6, "cmd")
    assert f"- `{crashed / 'rounds.csv'}`: its error\n" in md and f"- `{killed / 'rounds.csv'}`\n" in md
    assert f"- `{early / 'rounds.csv'}`: no data" in md and f"- `{header / 'rounds.csv'}`: after the header" in md
    assert "earlier attempt" not in md and "older error" not in md and "before the header" not in md


def test_older_rows_without_an_environment_read_as_unknown_beside_newer_ones(tmp_path):
    _write_run(tmp_path, "new", _rows("new", 0), _config())
    _write_run(tmp_path, "old", [{k: v for k, v in r.items() if k != "env"} for r in _rows("old", 1)], _config())
    rows, _ = report.load([str(tmp_path)])
    assert rows.groupby("run_id")["env"].first().to_dict() == {"new": "cpu", "old": "unknown"}


def test_a_line_says_its_run_length_where_lengths_differ_and_a_seed_run_twice_has_a_spread():
    rows = pd.DataFrame(_rows("a", 0, (0.5, 0.7)) + _rows("b", 0, (0.5, 0.72)) + _rows("c", 0, (0.5, 0.6, 0.8)))
    t = report.table(report.per_run(rows, 0.9))
    md = report.markdown(t, [], 0.9, "cmd")
    assert "| fashion_mnist (shards, 2 rounds) |" in md and "| fashion_mnist (shards, 3 rounds) |" in md
    assert "| 1 (2 runs) | 0.710 ± 0.014 |" in md  # one seed, two runs: their spread
    assert "| 1 | 0.800 |" in md


def test_one_run_of_a_commit_is_one_run(tmp_path):
    rows = pd.DataFrame(_rows("a", 0) + _rows("b", 1)).assign(code=["0123456789ab"] * 2 + ["ba9876543210"] * 2)
    assert report.code_versions(rows) == "`0123456789ab` 1 run; `ba9876543210` 1 run"


def _capture(monkeypatch, method):
    """What `method` of every Axes is given: (label, x, y, yerr; an error bar's as its lower and upper lengths)."""
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, method, lambda self, x, y, **kw: drawn.append(
        (kw.get("label"), list(x), [round(v, 6) for v in y], np.round(kw.get("yerr", []), 6).tolist())))
    return drawn


@pytest.mark.filterwarnings("ignore:No artists with labels")  # errorbar is replaced: nothing to put in a legend
def test_the_ratio_plot_draws_mean_and_std_over_seeds_and_protocols_with_other_results_apart(tmp_path, monkeypatch):
    rows = pd.DataFrame(_rows("d0", 0, (0.5, 0.8), **DENSE) + _rows("d1", 1, (0.5, 0.82), **DENSE)
                        + _rows("k0", 0, (0.5, 0.7)) + _rows("k1", 1, (0.5, 0.74))
                        + _rows("s0", 0, (0.5, 0.6), ratio=0.01)
                        + _rows("m", 0, (0.5, 0.75), **MASKED)
                        + _rows("p", 0, (0.5, 0.7), **MASKED | {"secagg": "secaggplus"}))
    drawn = _capture(monkeypatch, "errorbar")
    report_plots.plot_accuracy_vs_ratio(report.per_run(rows.assign(other=""), 0.9), tmp_path / "plot.png")
    lines = {label.rsplit(", ", 1)[-1]: (x, y, e) for label, x, y, e in drawn}
    spread = [0.0, round(float(np.std([0.7, 0.74], ddof=1)), 6), round(float(np.std([0.8, 0.82], ddof=1)), 6)]
    assert lines["fashion_mnist shards"] == ([0.01, 0.1, 1.0], [0.6, 0.72, 0.81], [spread, spread])  # below, above
    assert lines["dh fresh(marginals)"][1] == [0.75] and lines["secaggplus fresh(marginals)"][1] == [0.7]


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_the_bytes_plot_draws_each_ratios_mean_upload_and_accuracy_over_seeds(tmp_path, monkeypatch):
    rows = pd.DataFrame(_rows("a", 0, (0.5, 0.7)) + _rows("b", 1, (0.5, 0.74), bytes_up=40000))
    drawn = _capture(monkeypatch, "plot")
    report_plots.plot_accuracy_vs_bytes(report.per_run(rows.assign(other=""), 0.9), tmp_path / "plot.png")
    assert [(x, y) for _, x, y, _ in drawn] == [([600.0], [0.72])]  # 400 and 800 bytes per client


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_the_round_plot_draws_the_mean_over_seeds_at_each_evaluated_round_counted_from_one(tmp_path, monkeypatch):
    rows = pd.DataFrame(_rows("a", 0, (0.5, np.nan, 0.7)) + _rows("b", 1, (0.6, np.nan, 0.9)))
    drawn = _capture(monkeypatch, "plot")
    report_plots.plot_accuracy_vs_round(rows.assign(other=""), tmp_path / "plot.png")
    assert [(x, y) for _, x, y, _ in drawn] == [([1, 3], [0.55, 0.8])]


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_a_round_faster_than_its_stages_summed_over_the_cohort_has_no_negative_other_time(tmp_path, monkeypatch):
    rows = pd.DataFrame(_rows("a", 0, t_round=0.5))  # six stages of 0.1 s
    drawn = _capture(monkeypatch, "barh")  # (label, positions, seconds)
    monkeypatch.setattr(report_plots.plt.Axes, "scatter", lambda self, *a, **kw: None)
    report_plots.plot_time_breakdown(report.per_run(rows.assign(other=""), 0.9), tmp_path / "plot.png")
    assert {label: y for label, _, y, _ in drawn} == {**{s.removeprefix("t_"): [0.1] for s in report.STAGES},
                                                      "other": [0.0]}


def test_two_dense_lines_alike_but_for_the_codecs_keys_give_each_line_one_baseline(tmp_path):
    """Dense run with and without error feedback (a codec key: no other setting): both are alike to the top-k
    line, which takes the first, and every line keeps its own row."""
    _write_run(tmp_path, "d", _rows("d", 0, (0.6, 0.8), **DENSE), _config())
    _write_run(tmp_path, "e", _rows("e", 0, (0.6, 0.8), **DENSE | {"error_feedback": True}), _config())
    _write_run(tmp_path, "k", _rows("k", 0, (0.6, 0.75)), _config())
    t = _table(tmp_path)
    assert len(t) == 3 and t["accuracy_change"].round(6).tolist() == [0.0, 0.0, -0.05]
