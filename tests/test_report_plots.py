"""experiments.report: each masked index policy and each field width is its own line and its own table row, never
pooled with another."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from experiments import report, report_plots


def _mark_done(run):
    """The done.json a finished run writes last: its run id and number of rows."""
    rows = pd.read_csv(run / "rounds.csv")
    (run / "done.json").write_text(report.json.dumps({"run_id": str(rows["run_id"].iloc[0]), "rounds": len(rows)}))


def _run(secagg, policy, ratio, acc, compression="topk"):
    return dict(dataset="fashion_mnist", partition="iid", model="lenet", n_params=10, rounds=30, secagg=secagg,
                compression=compression, ratio=ratio, error_feedback=True, index_policy=policy, final_accuracy=acc)


@pytest.mark.filterwarnings("ignore:No artists with labels")  # errorbar is replaced: nothing to put in a legend
def test_policies_are_separate_lines_protocols_with_equal_results_share_one_and_one_ratio_is_a_line_from_dense(
        tmp_path, monkeypatch):
    runs = pd.DataFrame([
        _run("none", "dense", 1.0, 0.80, "none"), _run("none", "per-client", 0.1, 0.78),
        _run("none", "per-client", 0.01, 0.70),
        *[_run(s, "all", 1.0, 0.80, "none") for s in ("dh", "secaggplus")],
        *[_run(s, "fresh(marginals)", r, a) for s in ("dh", "secaggplus") for r, a in ((0.1, 0.75), (0.01, 0.60))],
        _run("dh", "fresh(exact)", 0.1, 0.77), _run("dh", "fresh(exact)", 0.01, 0.68),
        _run("dh", "randk", 0.01, 0.20),  # one ratio: a line from dense to it
        _run("none", "per-client", 0.01, 0.71, "topk") | {"other": "fl.server_momentum=0.5"},
        _run("none", "dense", 1.0, 0.82, "none") | {"other": "fl.server_momentum=0.5"},
    ])
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar",
                        lambda self, x, y, **kw: drawn.append((kw["label"], list(x), list(y))))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    lines = {label.split(", ", 2)[-1] if "fresh" in label or "randk" in label or "momentum" in label else "plain":
             (x, y) for label, x, y in drawn}
    assert len(drawn) == 5
    assert lines["dh randk"] == ([0.01, 1.0], [0.20, 0.80])
    assert lines["fl.server_momentum=0.5"] == ([0.01, 1.0], [0.71, 0.82])  # a study's per-client baseline
    assert lines["dh/secaggplus fresh(marginals)"] == ([0.01, 0.1, 1.0], [0.60, 0.75, 0.80])
    assert lines["dh fresh(exact)"] == ([0.01, 0.1, 1.0], [0.68, 0.77, 0.80])
    assert lines["plain"] == ([0.01, 0.1, 1.0], [0.70, 0.78, 0.80])


def _rows(run_id, seed, field_bits, accuracy):
    """Two rounds of a masked top-k run as fl.results writes them (only the columns the report reads)."""
    return [dict(run_id=run_id, seed=seed, env="cpu", dataset="fashion_mnist", partition="shards", model="lenet",
                 n_params=10, compression="topk", ratio=0.02, error_feedback=True, secagg="dh",
                 index_policy="fresh(marginals)", field_bits=field_bits, round=r, accuracy=accuracy - 0.1 * (1 - r),
                 num_clients=100, bytes_up=1000 * field_bits, bytes_up_per_client=100 * field_bits,
                 bytes_down_per_client=500, **{s: 0.1 for s in report.STAGES}, t_round=1.0) for r in (0, 1)]


def test_runs_that_differ_only_in_field_width_are_separate_rows_not_seeds():
    rows = pd.DataFrame(_rows("a", 0, 20, 0.66) + _rows("b", 1, 20, 0.68) + _rows("c", 0, 12, 0.67))
    t = report.table(report.per_run(rows, target=0.6)).set_index("field_bits")
    assert sorted(t.index) == [12, 20]
    assert t.loc[20, "seeds"] == 2 and t.loc[20, "accuracy"] == pytest.approx(0.67)
    assert t.loc[12, "seeds"] == 1 and t.loc[12, "up_per_client"] == 1200
    md = report.markdown(report.table(report.per_run(rows, target=0.6)), [], 0.6, "cmd")
    assert "| field bits |" in md and "| 12 | 1 |" in md and "| 20 | 2 |" in md


def test_rows_kept_before_the_field_width_column_read_as_not_masked(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    pd.DataFrame(_rows("a", 0, 20, 0.7)).drop(columns="field_bits").to_csv(run / "rounds.csv", index=False)
    _mark_done(run)
    rows, incomplete = report.load([str(tmp_path)])
    assert rows["field_bits"].isna().all() and incomplete == []


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_masked_lines_of_different_field_widths_are_drawn_apart(tmp_path, monkeypatch):
    runs = pd.DataFrame([_run("none", "dense", 1.0, 0.80, "none"), _run("dh", "all", 1.0, 0.80, "none"),
                         *[dict(_run("dh", "fresh(marginals)", r, a), field_bits=b)
                           for b, pts in ((20, ((0.1, 0.75), (0.01, 0.60))), (12, ((0.1, 0.74), (0.01, 0.62))))
                           for r, a in pts]])
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar",
                        lambda self, x, y, **kw: drawn.append((kw["label"], list(x), list(y))))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    lines = {label.rsplit(", ", 1)[-1]: y for label, x, y in drawn}
    assert lines["20-bit field"] == [0.60, 0.75, 0.80] and lines["12-bit field"] == [0.62, 0.74, 0.80]
    # a masked dense run of 20 bits starts the 20-bit line only: no 12-bit dense run was run
    runs.loc[runs["compression"] == "none", "field_bits"] = [np.nan, 20]
    drawn.clear()
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    lines = {label.rsplit(", ", 1)[-1]: (x, y) for label, x, y in drawn}
    assert lines["20-bit field"] == ([0.01, 0.1, 1.0], [0.60, 0.75, 0.80])
    assert lines["12-bit field"] == ([0.01, 0.1], [0.62, 0.74])
    # a masked line at another setting of the same data names its width too (it read as another setting's line)
    drawn.clear()
    momentum = dict(_run("dh", "fresh(marginals)", 0.01, 0.66), field_bits=20, other="fl.server_momentum=0.5")
    report_plots.plot_accuracy_vs_ratio(pd.concat([runs, pd.DataFrame([momentum])]), tmp_path / "plot.png")
    assert [label for label, *_ in drawn if "momentum" in label] == [
        "lenet (10 params), fashion_mnist iid, dh fresh(marginals), 20-bit field, fl.server_momentum=0.5"]


def test_the_table_names_the_code_of_its_runs_and_older_rows_say_they_did_not_record_it(tmp_path):
    for name, code in (("a", "0123456789ab"), ("b", "0123456789ab"), ("c", None)):
        run = tmp_path / name
        run.mkdir()
        frame = pd.DataFrame(_rows(name, 0, 20, 0.7))
        if code is not None:
            frame["code"] = code
        frame.to_csv(run / "rounds.csv", index=False)
        _mark_done(run)
    rows, _ = report.load([str(tmp_path)])
    line = report.code_versions(rows)
    assert line == f"`0123456789ab` 2 runs; 1 run {report.UNRECORDED}"
    md = report.markdown(report.table(report.per_run(rows, 0.6)), [], 0.6, "cmd", line)
    assert f"Code (commit; `+modified`: with changes not committed): {line}" in md
    old, _ = report.load([str(tmp_path / "c")])
    assert report.code_versions(old) == ""  # a table of older rows only is unchanged


def test_round_curves_are_three_panels_to_a_row_one_per_model_and_partition(tmp_path, monkeypatch):
    rows = pd.DataFrame([dict(r, model=m, partition=p, compression="none", secagg="none", ratio=1.0,
                              error_feedback=True)
                         for m in ("mlp_small", "lenet")
                         for p in ("iid", "shards", "dirichlet")[:3 if m == "lenet" else 2]
                         for r in _rows(f"{m}-{p}", 0, 20, 0.7)])
    made = []
    subplots = report_plots.plt.subplots
    monkeypatch.setattr(report_plots.plt, "subplots", lambda *a, **kw: made.append(subplots(*a, **kw)) or made[-1])
    report_plots.plot_accuracy_vs_round(rows, tmp_path / "curves.png")
    fig, axes = made[0]
    assert axes.shape == (2, 3) and (tmp_path / "curves.png").stat().st_size > 0
    visible = [ax.get_title() for ax in axes.flat if ax.get_visible()]
    assert len(visible) == 5 and "lenet, fashion_mnist (dirichlet)" in visible
    assert all(len(ax.get_lines()) == 1 for ax in axes.flat if ax.get_visible())


@pytest.mark.filterwarnings("ignore:No artists with labels")  # plot is replaced: nothing to put in a legend
def test_round_curves_of_runs_of_different_lengths_are_drawn_apart(tmp_path, monkeypatch):
    short = [dict(r, round=r["round"], accuracy=0.5) for r in _rows("short", 0, 20, 0.7)]
    long = [dict(r, accuracy=0.9) for r in _rows("long", 0, 20, 0.7)] + \
        [dict(_rows("long", 0, 20, 0.7)[0], round=2, accuracy=0.9)]
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "plot", lambda self, x, y, **kw: drawn.append((kw["label"], list(y))))
    report_plots.plot_accuracy_vs_round(pd.DataFrame(short + long), tmp_path / "curves.png")
    assert sorted(drawn) == [("topk 0.02 + dh (fresh(marginals)) (2 rounds)", [0.5, 0.5]),
                             ("topk 0.02 + dh (fresh(marginals)) (3 rounds)", [0.9, 0.9, 0.9])]


def test_evaluation_carried_by_the_next_round_counts_in_the_evaluate_stage_and_older_rows_read_as_before():
    carried = pd.DataFrame(_rows("a", 0, 20, 0.66))
    carried["t_evaluate"], carried["t_evaluate_carried"] = 0.001, [0.4, np.nan]  # the last round: after itself
    older = pd.DataFrame(_rows("b", 1, 20, 0.66))  # no t_evaluate_carried column
    runs = report.per_run(pd.concat([carried, older]), target=0.6).set_index("seed")
    assert runs.loc[0, "t_evaluate"] == pytest.approx((0.401 + 0.001) / 2)
    assert runs.loc[1, "t_evaluate"] == pytest.approx(0.1)


def test_a_fresh_runs_own_summary_bits_are_in_its_policy_and_it_is_never_pooled_with_the_default(tmp_path):
    for name, seed, summary_bits, quant_bits, accuracy in (("a", 0, None, 16, 0.60), ("b", 1, 16, 16, 0.62),
                                                             ("c", 0, 8, 16, 0.66), ("d", 1, 8, 16, 0.64)):
        run = tmp_path / name
        run.mkdir()
        pd.DataFrame(_rows(name, seed, 20, accuracy)).to_csv(run / "rounds.csv", index=False)
        (run / "config.json").write_text(report.json.dumps(
            {"compression": {"sketch_quant_bits": summary_bits}, "secagg": {"quant_bits": quant_bits}}))
        _mark_done(run)
    (tmp_path / "e").mkdir()  # a run without its config.json keeps its label
    pd.DataFrame(_rows("e", 2, 20, 0.61)).to_csv(tmp_path / "e" / "rounds.csv", index=False)
    _mark_done(tmp_path / "e")
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, target=0.6)).set_index("index_policy")
    assert sorted(t.index) == ["fresh(marginals)", "fresh(marginals), summary 8 bits"]
    assert t.loc["fresh(marginals)", "seeds"] == 3  # null, or equal to quant_bits: the default
    assert t.loc["fresh(marginals), summary 8 bits", "accuracy"] == pytest.approx(0.65)


def test_a_folder_that_does_not_exist_is_an_error_not_an_empty_part_of_the_table(tmp_path):
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    pd.DataFrame(_rows("a", 0, 20, 0.7)).to_csv(run / "rounds.csv", index=False)
    _mark_done(run)
    assert len(report.load([str(tmp_path / "runs")])[0]) > 0
    with pytest.raises(SystemExit, match="no such folder: .*runz"):
        report.load([str(tmp_path / "runs"), str(tmp_path / "runz")])


@pytest.mark.parametrize("column, value, kind", [("accuracy", "0.9x1", "number"), ("bytes_up", "20000?", "number"),
                                                 ("error_feedback", "Flase", "flag")])
def test_a_finished_runs_value_that_is_not_a_number_stops_the_report_naming_it(tmp_path, column, value, kind):
    """A damaged accuracy stopped the report with pandas' "'>=' not supported between 'str' and 'float'"; a damaged
    byte count was added up as text; a damaged flag read as True."""
    rows = _rows("a", 0, 20, 0.7)
    rows[1][column] = value
    _write_run(tmp_path, "a", rows, _config())
    said = f"{tmp_path / 'a' / 'rounds.csv'}, line 3: {column} is '{value}', not a {kind}"
    with pytest.raises(SystemExit, match=re.escape(said)):
        report.load([str(tmp_path)])


def test_a_flag_column_read_as_numbers_other_than_0_and_1_stops_the_report_naming_it(tmp_path):
    """A flag column whose every value parses as a number skipped the check: 2 was read as True."""
    rows = _rows("a", 0, 20, 0.7)
    rows[0]["error_feedback"], rows[1]["error_feedback"] = 1, 2
    _write_run(tmp_path, "a", rows, _config())
    with pytest.raises(SystemExit, match=re.escape(f"{tmp_path / 'a' / 'rounds.csv'}, line 3: error_feedback is 2, "
                                                   "not a flag")):
        report.load([str(tmp_path)])
    rows[1]["error_feedback"] = 0  # 0 and 1 are flags
    (tmp_path / "a" / "rounds.csv").unlink()
    pd.DataFrame(rows).to_csv(tmp_path / "a" / "rounds.csv", index=False)
    assert report.load([str(tmp_path)])[0]["error_feedback"].tolist() == [1, 0]


def test_last_5_averages_each_runs_last_five_evaluated_rounds_then_the_seeds():
    """The column where a final round's swing would mislead: rounds without an evaluation do not count."""
    rows = []
    for run_id, seed, accuracies in (("a", 0, [0.1, 0.2, 0.5, 0.6, None, 0.7, 0.8, 0.9]),
                                     ("b", 1, [0.1] * 6 + [0.3, 0.5])):
        for r, acc in enumerate(accuracies):
            row = _rows(run_id, seed, 20, 0.5)[0]
            rows.append({**row, "round": r, "accuracy": acc})
    runs = report.per_run(pd.DataFrame(rows), target=0.6)
    # (.5+.6+.7+.8+.9)/5; (.1+.1+.1+.3+.5)/5
    assert runs.set_index("seed")["last_accuracy"].round(6).to_dict() == {0: 0.7, 1: 0.22}
    t = report.table(runs)
    assert t["accuracy_last"].round(6).tolist() == [0.46] and t["accuracy"].round(6).tolist() == [0.7]
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| accuracy | last 5 | Δ vs dense |" in md and "| 0.700 ± 0.283 | 0.460 |" in md


@pytest.mark.filterwarnings("error")  # matplotlib warns of an empty legend
def test_a_ratio_plot_with_no_line_to_draw_says_why_instead_of_an_empty_frame(tmp_path, monkeypatch):
    runs = pd.DataFrame([_run("dh", "fresh(marginals)", 0.1, 0.75) | {"error_feedback": False},
                         _run("none", "per-client", 0.01, 0.6, "qsgd")])
    texts = []
    text = report_plots.plt.Axes.text
    monkeypatch.setattr(report_plots.plt.Axes, "text",
                        lambda self, *a, **kw: texts.append(a[2]) or text(self, *a, **kw))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    assert texts == [report_plots.NO_RATIO_LINE] and (tmp_path / "plot.png").stat().st_size > 0
    texts.clear()
    report_plots.plot_accuracy_vs_ratio(pd.concat([runs, pd.DataFrame([_run("none", "dense", 1.0, 0.8, "none")])]),
                                  tmp_path / "plot.png")
    assert texts == []  # the dense point is drawn, with its legend


def _write_run(root, name, rows, config):
    run = root / name
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "rounds.csv", index=False)
    (run / "config.json").write_text(json.dumps(config))
    _mark_done(run)


def _config(lr=0.1, policy="fresh", **secagg):
    return {"seed": 0, "backend": "inline", "results": {"dir": "x"}, "fl": {"lr": lr, "rounds": 2},
            "compression": {"index_policy": policy}, "secagg": {"dropout": 0.0, **secagg}}


@pytest.mark.filterwarnings("ignore:No artists with labels")  # plot is replaced: nothing to put in a legend
def test_runs_that_differ_in_a_setting_the_columns_do_not_show_are_separate_lines_naming_it(tmp_path, monkeypatch):
    """An lr swept at one seed was pooled as seeds of one setting, in the table and in every plot."""
    _write_run(tmp_path, "a", _rows("a", 0, 20, 0.7), _config(lr=0.1))
    _write_run(tmp_path, "b", _rows("b", 0, 20, 0.5), _config(lr=0.05))
    _write_run(tmp_path, "c", _rows("c", 1, 20, 0.6), {**_config(lr=0.05), "seed": 1, "backend": "ray"})
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6)).set_index("other")
    assert sorted(t.index) == ["fl.lr=0.05", "fl.lr=0.1"]  # the seed and the backend are not settings
    assert t.loc["fl.lr=0.1", "accuracy"] == pytest.approx(0.7) and t.loc["fl.lr=0.05", "seeds"] == 2
    md = report.markdown(report.table(report.per_run(rows, 0.6)), [], 0.6, "cmd")
    assert "| other settings |" in md and "| fl.lr=0.05 | 2 |" in md
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "plot", lambda self, x, y, **kw: drawn.append(kw["label"]))
    report_plots.plot_accuracy_vs_round(rows, tmp_path / "curves.png")
    assert sorted(drawn) == ["topk 0.02 + dh (fresh(marginals)), fl.lr=0.05",
                             "topk 0.02 + dh (fresh(marginals)), fl.lr=0.1"]


def test_lines_of_two_environments_name_the_settings_they_differ_in_and_are_compared_only_setting_by_setting(tmp_path):
    """A Ray run of 100 clients and an inline run of 10 read as one setting in two environments ("Ray loses 56
    points"): keys were sought only among runs of one environment, and the environments' comparison pooled
    partitions and settings."""
    for name, env, clients, acc, partition in (("r", "ray", 100, 0.15, "shards"), ("i", "inline", 10, 0.7, "shards"),
                                              ("j", "inline", 10, 0.8, "iid")):
        _write_run(tmp_path, name, [dict(r, run_id=name, env=env, partition=partition, t_round=acc)
                                    for r in _rows(name, 0, 20, acc)],
                   {**_config(), "fl": {"lr": 0.1, "rounds": 2, "num_clients": clients}})
    rows, _ = report.load([str(tmp_path)])
    assert rows.groupby("run_id")["other"].first().to_dict() == {"r": "fl.num_clients=100", "i": "fl.num_clients=10",
                                                                   "j": ""}  # alone on its partition
    md = report.markdown(report.table(report.per_run(rows, 0.6)), [], 0.6, "cmd")
    # no setting ran in both: nothing to compare, where the inline seconds (0.75, two settings pooled) stood
    # beside the ray run's
    assert md.split("## Environments compared (seconds per round)")[1].strip() == \
        "No setting ran in more than one environment."
    _write_run(tmp_path, "i2", [dict(r, run_id="i2", env="ray", t_round=0.3) for r in _rows("i2", 1, 20, 0.7)],
               {**_config(), "seed": 1, "fl": {"lr": 0.1, "rounds": 2, "num_clients": 10}})
    rows, _ = report.load([str(tmp_path)])
    compared = (report.markdown(report.table(report.per_run(rows, 0.6)), [], 0.6, "cmd")
                .split("Environments compared")[1])
    assert [[c.strip() for c in line.split("|")[-3:-1]] for line in compared.splitlines() if "fl.num_clients" in line] \
        == [["0.7", "0.3"]]  # the shards setting of 10 clients, inline and ray; the others ran in one environment


def test_masking_keys_of_unmasked_runs_and_keys_older_configs_lack_do_not_split_a_setting(tmp_path):
    plain = [dict(r, secagg="none", index_policy="per-client", field_bits=np.nan) for r in _rows("a", 0, 20, 0.7)]
    _write_run(tmp_path, "a", plain, _config(policy="sketch"))
    _write_run(tmp_path, "b", [dict(r, run_id="b", seed=1) for r in plain],
               {**_config(policy="fresh", dropout=0.0, bits=None), "seed": 1})
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6))
    assert len(t) == 1 and t["seeds"].iloc[0] == 2 and t["other"].iloc[0] == ""
    assert "other settings" not in report.markdown(t, [], 0.6, "cmd")


@pytest.mark.parametrize("policy, split", [("prev_topk", False), ("sketch", True)])
def test_a_shared_index_key_splits_a_setting_only_where_its_policy_reads_it(tmp_path, policy, split):
    """prev_topk's seeds recorded before and after `fresh`'s default summary moved from blocks to marginals were two
    lines of one seed each, one named `compression.fresh_summary=blocks` (results/fmnist): only `fresh` reads the
    summary. `sketch` reads sketch_rows: runs at two values of it stay apart."""
    def config(seed, summary, sketch_rows):
        return {**_config(policy=policy), "seed": seed,
                "compression": {"name": "topk", "client": True, "index_policy": policy, "fresh_summary": summary,
                                "sketch_rows": sketch_rows}}

    masked = [dict(r, index_policy=policy) for r in _rows("a", 0, 20, 0.7)]
    _write_run(tmp_path, "a", masked, config(0, "blocks", 5))
    _write_run(tmp_path, "b", [dict(r, run_id="b", seed=1) for r in masked], config(1, "marginals", 5))
    _write_run(tmp_path, "c", [dict(r, run_id="c", seed=2) for r in masked], config(2, "marginals", 3))
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6)).set_index("other")
    if split:
        assert t["seeds"].to_dict() == {"compression.sketch_rows=5": 2, "compression.sketch_rows=3": 1}
    else:
        assert t["seeds"].to_dict() == {"": 3}
        assert "other settings" not in report.markdown(t.reset_index(), [], 0.6, "cmd")


def test_a_setting_run_at_one_value_of_a_swept_key_still_names_it(tmp_path):
    """A momentum swept at ratio 0.03 but run at 0.5 only for ratio 0.02 left the 0.02 row's other settings blank:
    it read as the default momentum (results/fmnist/fedavgm's 8-bit rows at 0.01 and 0.02)."""
    def config(momentum, dropout):
        return {**_config(dropout=dropout), "fl": {"lr": 0.1, "rounds": 2, "server_momentum": momentum}}

    for name, ratio, momentum, dropout in (("a", 0.03, 0.0, 0.0), ("b", 0.03, 0.5, 0.2), ("c", 0.02, 0.5, 0.0)):
        _write_run(tmp_path, name, [dict(r, run_id=name, ratio=ratio) for r in _rows(name, 0, 20, 0.7)],
                   config(momentum, dropout))
    plain = [dict(r, run_id="p", secagg="none", index_policy="per-client", field_bits=np.nan)
             for r in _rows("p", 0, 20, 0.7)]
    _write_run(tmp_path, "p", plain, config(0.5, 0.3))  # dropouts act on an unmasked run too: named for it
    rows, _ = report.load([str(tmp_path)])
    other = rows.groupby("run_id")["other"].first().to_dict()
    assert other == {"a": "fl.server_momentum=0.0, secagg.dropout=0.0",
                     "b": "fl.server_momentum=0.5, secagg.dropout=0.2",
                     "c": "fl.server_momentum=0.5, secagg.dropout=0.0",
                     "p": "fl.server_momentum=0.5, secagg.dropout=0.3"}


@pytest.mark.filterwarnings("ignore:No artists with labels")  # plot is replaced: nothing to put in a legend
def test_accuracy_vs_bytes_has_a_panel_per_partition_and_a_line_per_index_policy(tmp_path, monkeypatch):
    """Both partitions were one panel, their accuracies averaged; index policies and field widths were pooled."""
    runs = pd.DataFrame([dict(_run("dh", pol, r, a + (0.1 if part == "iid" else 0)), partition=part, field_bits=20,
                              upload_total_per_client=r * 1000)
                         for part in ("iid", "shards") for pol in ("fresh(marginals)", "fresh(exact)")
                         for r, a in ((0.1, 0.7), (0.01, 0.6))])
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "plot", lambda self, x, y, **kw: drawn.append((kw["label"], list(y))))
    report_plots.plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png")
    assert len(drawn) == 4 and ("topk + dh (fresh(exact))", [0.6, 0.7]) in drawn
    assert [y for label, y in drawn if label == "topk + dh (fresh(exact))"] == [pytest.approx([0.7, 0.8]), [0.6, 0.7]]


def test_each_line_is_compared_with_the_dense_run_of_its_own_other_settings(tmp_path):
    """Two dense lines (two lr) beside top-k lines crashed the table ('non-unique multi-index')."""
    dense = [dict(r, compression="none", ratio=1.0, secagg="none", index_policy="dense", field_bits=np.nan)
             for r in _rows("d", 0, 20, 0.7)]
    sparse = [dict(r, secagg="none", index_policy="per-client", field_bits=np.nan) for r in _rows("s", 0, 20, 0.7)]
    for lr, acc in ((0.1, 0.9), (0.05, 0.6)):
        _write_run(tmp_path, f"d{lr}",
                   [dict(r, run_id=f"d{lr}", accuracy=acc, bytes_up_per_client=1000) for r in dense],
                   {**_config(lr=lr), "compression": {"name": "none"}})
        _write_run(tmp_path, f"s{lr}", [dict(r, run_id=f"s{lr}", accuracy=acc - 0.1) for r in sparse],
                   {**_config(lr=lr), "compression": {"name": "topk", "ratio": 0.02}})
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6)).set_index(["compression", "other"])
    assert t.loc[("topk", "fl.lr=0.05"), "accuracy_change"] == pytest.approx(-0.1)
    assert t.loc[("topk", "fl.lr=0.1"), "accuracy_change"] == pytest.approx(-0.1)
    assert t.loc[("topk", "fl.lr=0.1"), "up_vs_dense"] == pytest.approx(2.0)
    # a line whose own dense run is missing, beside two dense lines of other settings: no baseline, not either
    _write_run(tmp_path, "s0.2", [dict(r, run_id="s0.2", accuracy=0.5) for r in sparse],
               {**_config(lr=0.2), "compression": {"name": "topk", "ratio": 0.02}})
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6)).set_index(["compression", "other"])
    assert np.isnan(t.loc[("topk", "fl.lr=0.2"), "accuracy_change"])
    assert np.isnan(t.loc[("topk", "fl.lr=0.2"), "up_vs_dense"])
    assert t.loc[("topk", "fl.lr=0.05"), "accuracy_change"] == pytest.approx(-0.1)


@pytest.mark.filterwarnings("ignore:No artists with labels")  # barh is replaced: nothing to put in a legend
def test_a_plain_runs_time_bar_stacks_every_stage_though_it_has_no_masking_stage(tmp_path, monkeypatch):
    """Unmasked runs' blank t_mask made every stage above it (aggregate, decode, evaluate) vanish from the bar."""
    runs = pd.DataFrame([dict(_run("none", "dense", 1.0, 0.8, "none"), t_train=1.0, t_encode=0.1, t_mask=np.nan,
                              t_aggregate=0.1, t_decode=np.nan, t_evaluate=0.5, t_round=2.0)])
    bars = {}
    monkeypatch.setattr(report_plots.plt.Axes, "barh",
                        lambda self, y, w, left, label: bars.update({label: (list(w), list(left))}))
    report_plots.plot_time_breakdown(runs, tmp_path / "time.png")
    assert bars["evaluate"] == ([0.5], [pytest.approx(1.2)]) \
        and bars["other"] == ([pytest.approx(0.3)], [pytest.approx(1.7)])


def test_lines_that_lost_clients_or_rounds_say_how_many_and_other_tables_have_no_such_columns():
    rows = [dict(r, dropped=d, rejected=0, aborted=a) for r, d, a in zip(_rows("a", 0, 20, 0.7), (4, 2), (False, True))]
    t = report.table(report.per_run(pd.DataFrame(rows), 0.6))
    assert (t["dropped_per_round"].iloc[0], t["aborted_rounds"].iloc[0]) == (3.0, 1)
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| dropped / round | rejected / round | clipped / round | aborted rounds |" in md
    assert "| 3.00 | 0.00 | 0.00 | 1 |" in md
    calm = report.table(report.per_run(pd.DataFrame([dict(r, dropped=0, rejected=0, aborted=False)
                                                     for r in rows]), 0.6))
    assert "dropped / round" not in report.markdown(calm, [], 0.6, "cmd")


def test_the_steps_each_round_trained_are_a_column_where_the_rows_have_them_and_absent_from_older_tables(tmp_path):
    """local_steps (the work, where seconds differ by host) averaged over rounds and seeds; rows written before the
    column leave the table, its notes and its CSV as they were."""
    rows = [dict(r, local_steps=s) for r, s in zip(_rows("a", 0, 20, 0.7), (1200, 900))] + \
        [dict(r, local_steps=s) for r, s in zip(_rows("b", 1, 20, 0.7), (1100, 800))]
    t = report.table(report.per_run(pd.DataFrame(rows), 0.6))
    assert t["steps_per_round"].tolist() == [1000.0]
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| round s | steps / round | host |" in md and "| 1.000 | 1,000 | " in md and "Steps / round:" in md
    older = report.table(report.per_run(pd.DataFrame(_rows("a", 0, 20, 0.7)), 0.6))
    assert older["steps_per_round"].isna().all()
    md = report.markdown(older, [], 0.6, "cmd")
    assert "steps" not in md.lower()
    for name, written in (("new", rows[:2]), ("old", _rows("a", 0, 20, 0.7))):  # run a's two rounds
        _write_run(tmp_path / name, "a", written, _config())
        report.main([str(tmp_path / name), "--out", str(tmp_path / f"{name}_report"), "--target", "0.6"])
    assert "steps_per_round" in pd.read_csv(tmp_path / "new_report" / "topk_table.csv")
    assert "steps_per_round" not in pd.read_csv(tmp_path / "old_report" / "topk_table.csv")


def test_every_line_of_a_crowded_panel_looks_different_and_the_title_fits_the_figure(tmp_path, monkeypatch):
    """26 settings on one panel: 20 colours came round again with the same marker, so six pairs of lines looked
    alike, and a one-panel figure cut its title off at both sides. The legend stays under the axis label."""
    runs = pd.DataFrame([dict(_run("none", "per-client", r, 0.5 + i / 100), other=f"fl.lr={i}",
                              upload_total_per_client=r * 1000) for i in range(26) for r in (0.1, 0.01)])
    monkeypatch.setattr(report, "setting_names", lambda g, ratio=True: g["other"])
    made = []
    subplots = report_plots.plt.subplots
    monkeypatch.setattr(report_plots.plt, "subplots", lambda *a, **kw: made.append(subplots(*a, **kw)) or made[-1])
    monkeypatch.setattr(report_plots.plt, "close", lambda fig: None)
    report_plots.plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png")
    fig, axes = made[0]
    lines = axes[0, 0].get_lines()
    assert len(lines) == 26
    looks = {(tuple(np.round(report_plots.matplotlib.colors.to_rgba(line.get_color()), 3)), line.get_marker())
             for line in lines}
    assert len(looks) == 26
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width
    label, legend = (axes[0, 0].xaxis.label.get_window_extent(renderer),
                     axes[0, 0].get_legend().get_window_extent(renderer))
    assert legend.y1 <= label.y0 and legend.y0 >= 0  # under the axis label, inside the figure


def _figures(monkeypatch):
    """The (figure, axes) of each plot drawn from here on, kept open."""
    made = []
    subplots = report_plots.plt.subplots
    monkeypatch.setattr(report_plots.plt, "subplots", lambda *a, **kw: made.append(subplots(*a, **kw)) or made[-1])
    monkeypatch.setattr(report_plots.plt, "close", lambda fig: None)
    return made


def test_a_crowded_panel_of_runs_under_several_conditions_is_a_panel_per_condition_its_lines_alike_in_each(
        tmp_path, monkeypatch):
    """The stragglers study's 32 lines on one panel, 16 of them differing only in the stragglers' settings, could
    not be told apart: such a panel is one panel per condition (the settings outside the codec), its title naming
    the condition, its lines the codec's settings only (a masked line's threshold too), drawn alike in every panel
    and on one y range (and the bytes on one x range)."""
    codecs = [("none", 1.0, "none")] + [(c, 0.01, "none") for c in ("topk", "randk", "qsgd", "int8", "fp16", "ternary")]
    for stragglers in (0.0, 0.5):
        for i, (compression, ratio, secagg) in enumerate(codecs + [("topk", 0.01, "dh")] * (2 if stragglers else 0)):
            threshold = (None, 5)[i % 2] if secagg == "dh" else None
            name = f"{stragglers}-{i}"
            rows = [dict(r, compression=compression, ratio=ratio, secagg=secagg, field_bits=20 if secagg == "dh"
                         else np.nan, index_policy="fresh(marginals)" if secagg == "dh" else "per-client",
                         accuracy=r["accuracy"] - stragglers / 2 - i / 100,
                         bytes_up=r["bytes_up"] * (1 + 20 * stragglers)) for r in _rows(name, 0, 20, 0.8)]
            _write_run(tmp_path, name, rows, {**_config(threshold=threshold),
                                              "fl": {"lr": 0.1, "rounds": 2, "stragglers": stragglers}})
    rows, _ = report.load([str(tmp_path)])
    assert set(report.table(report.per_run(rows, 0.6))["other"]) >= {"fl.stragglers=0.0", "fl.stragglers=0.5",
                                                                      "fl.stragglers=0.5, secagg.threshold=5"}
    made = _figures(monkeypatch)
    report_plots.plot_accuracy_vs_round(rows, tmp_path / "curves.png")
    report_plots.plot_accuracy_vs_bytes(report.per_run(rows, 0.6), tmp_path / "bytes.png")
    for (fig, axes), lines, data in zip(made, (("none", "qsgd 0.01", "topk 0.01 + dh (fresh(marginals)), "
                                                "secagg.threshold=5"),
                                               ("none", "qsgd", "topk + dh (fresh(marginals)), secagg.threshold=5")),
                                        ("lenet", "lenet (10 params)")):
        panels = [ax for ax in axes.flat if ax.get_visible()]
        assert [ax.get_title() for ax in panels] == [f"{data}, fashion_mnist (shards)\nfl.stragglers={s}"
                                                     for s in ("0.0", "0.5")]
        drawn = [{line.get_label(): line for line in ax.get_lines()} for ax in panels]
        assert not any("stragglers" in label for d in drawn for label in d)
        assert lines[0] in drawn[0] and lines[1] in drawn[0] and lines[2] in drawn[1] and lines[2] not in drawn[0]
        assert {"secagg.threshold=null" in label for label in drawn[1]} == {True, False}
        for label in lines[:2]:
            a, b = drawn[0][label], drawn[1][label]
            assert (a.get_color(), a.get_marker()) == (b.get_color(), b.get_marker())
        looks = [(line.get_color(), line.get_marker()) for line in drawn[1].values()]
        assert len(set(looks)) == len(looks)
        assert panels[0].get_ylim() == panels[1].get_ylim()
        if data != "lenet":  # the bytes, 11 times more at the second condition here, on one x range too
            assert panels[0].get_xlim() == panels[1].get_xlim()
        assert [len(ax.get_lines()) for ax in panels] == [7, 9]


def test_a_seed_run_twice_is_counted_as_one_seed_and_the_table_says_how_many_runs(tmp_path):
    """The same cell rerun on another machine into another folder, both reported: two runs of one seed read as
    'seeds 1' with a standard deviation over two runs."""
    for folder, acc in (("laptop", 0.70), ("cluster", 0.72)):
        _write_run(tmp_path / folder, "a", [dict(r, run_id=folder, accuracy=acc) for r in _rows("a", 0, 20, acc)],
                   _config())
    _write_run(tmp_path / "cluster", "b", [dict(r, run_id="b", seed=1) for r in _rows("b", 1, 20, 0.74)], _config())
    rows, _ = report.load([str(tmp_path / "laptop"), str(tmp_path / "cluster")])
    t = report.table(report.per_run(rows, 0.6))
    assert (t["seeds"].iloc[0], t["runs"].iloc[0]) == (2, 3) and t["accuracy"].iloc[0] == pytest.approx(0.72)
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| 2 (3 runs) |" in md and report.REPEATS_NOTE in md
    single = report.table(report.per_run(rows[rows["run_id"] != "cluster"], 0.6))
    assert report.REPEATS_NOTE not in report.markdown(single, [], 0.6, "cmd")


def test_the_ratio_axis_is_labelled_at_the_ratios_run(tmp_path, monkeypatch):
    """Ratios under a decade apart (0.01-0.05) got log-scale minor tick labels that ran into each other."""
    runs = pd.DataFrame([_run("none", "dense", 1.0, 0.8, "none"),
                         *[_run("none", "per-client", r, a) for r, a in ((0.03, 0.75), (0.02, 0.74), (0.01, 0.7))]])
    ticks = []
    monkeypatch.setattr(report_plots.plt.Axes, "set_xticks",
                        lambda self, values, labels=None, **kw: ticks.append((list(values), list(labels))))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    assert ticks == [([0.01, 0.02, 0.03, 1.0], ["0.01", "0.02", "0.03", "1"])]


def test_a_spread_bar_stops_where_accuracy_does_at_0_and_1(tmp_path, monkeypatch):
    """Seeds of which one blew up (0.02 and 0.9: std 0.62 about a mean of 0.46) drew a bar below 0, and every panel
    sharing its range started at -0.2."""
    runs = pd.DataFrame([_run("none", "dense", 1.0, a, "none") for a in (0.02, 0.9)]
                        + [_run("none", "per-client", 0.01, a) for a in (0.7, 0.72)])
    made = _figures(monkeypatch)
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    (_, ax), = made  # one panel
    bars = sorted(tuple(np.round(np.asarray(segment)[:, 1], 4)) for c in ax.collections for segment in c.get_segments())
    spread = np.std([0.7, 0.72], ddof=1)
    assert bars == [(0.0, 1.0), tuple(np.round([0.71 - spread, 0.71 + spread], 4))]
    assert ax.get_ylim()[0] > -0.1


def test_a_ratio_plot_of_more_than_12_lines_is_a_panel_per_data_and_a_crowded_one_a_panel_per_condition(
        tmp_path, monkeypatch):
    """The memory study's ratio plot drew 31 lines of four data splits, each named by model and data, on one
    panel: past 12 lines each data split is its own panel (named in its title), and one of more than 12 lines
    under several conditions a panel per condition, its lines named by the codec's settings alone."""
    policies = ("fresh(marginals)", "fresh(exact)", "fresh(energy)", "sketch", "randk", "prev_topk")

    def lines(partition, condition, shift, codec_other=""):
        other = ", ".join(x for x in (codec_other, condition) if x)
        same = dict(partition=partition, other=other, condition=condition, codec_other=codec_other)
        return [_run("none", "dense", 1.0, 0.8 - shift, "none") | same,
                _run("none", "per-client", 0.01, 0.7 - shift) | same,
                *[_run("dh", p, 0.01, 0.6 - shift - i / 100) | same for i, p in enumerate(policies)]]
    runs = pd.DataFrame(lines("iid", "fl.server_momentum=0.0", 0.0) + lines("iid", "fl.server_momentum=0.5", 0.1)
                        + lines("shards", "", 0.2, codec_other="secagg.clip=0.1"))
    made = _figures(monkeypatch)
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "ratio.png")
    fig, axes = made[0]
    panels = [ax for ax in axes.flat if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [
        "lenet (10 params), fashion_mnist iid\nfl.server_momentum=0.0",
        "lenet (10 params), fashion_mnist iid\nfl.server_momentum=0.5", "lenet (10 params), fashion_mnist shards"]
    labels = [ax.get_legend_handles_labels()[1] for ax in panels]
    assert labels[0] == labels[1] == ["masked, dh fresh(energy)", "masked, dh fresh(exact)",
                                      "masked, dh fresh(marginals)", "masked, dh prev_topk", "masked, dh randk",
                                      "masked, dh sketch", "no masking"]
    assert labels[2][-1] == "no masking, secagg.clip=0.1" and len(labels[2]) == 7
    assert panels[0].get_ylim() == panels[1].get_ylim()
    assert "Top-k with error feedback" in fig._suptitle.get_text()
    # a plot of up to 12 lines stays one panel, each line named by its data
    made.clear()
    report_plots.plot_accuracy_vs_ratio(runs[runs["partition"] == "shards"], tmp_path / "ratio.png")
    (fig, ax), = made
    assert isinstance(ax, report_plots.plt.Axes)  # one panel, not a grid
    assert ax.get_legend_handles_labels()[1][-1] == "lenet (10 params), fashion_mnist shards, secagg.clip=0.1"


def test_the_title_of_a_tall_figure_stays_clear_of_its_first_row_of_panel_titles(tmp_path, monkeypatch):
    """Rows of panels titled on two lines (the learning-rate study's four, the memory study's three): tight_layout
    left the figure's title over the first row's panel titles."""
    policies = ("fresh(marginals)", "fresh(exact)", "fresh(energy)", "sketch", "randk", "prev_topk")
    codecs = [("none", "dense", 1.0, "none"), ("none", "per-client", 0.01, "topk")] + [
        ("dh", p, 0.01, "topk") for p in policies]
    runs = pd.DataFrame([_run(secagg, policy, ratio, 0.8 - i / 100 - lr / 50, compression)
                         | dict(other=f"fl.lr={lr}", condition=f"fl.lr={lr}", codec_other="",
                                upload_total_per_client=ratio * 1000)
                         for lr in range(10) for i, (secagg, policy, ratio, compression) in enumerate(codecs)])
    made = _figures(monkeypatch)
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "ratio.png")
    report_plots.plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png")
    assert len(made) == 2
    for fig, axes in made:
        panels = [ax for ax in axes.flat if ax.get_visible()]
        assert len(panels) == 10 and axes.shape[0] == 4 and all("\nfl.lr=" in ax.get_title() for ax in panels)
        renderer = fig.canvas.get_renderer()
        title = fig._suptitle.get_window_extent(renderer)
        assert max(ax.title.get_window_extent(renderer).y1 for ax in panels) <= title.y0
        assert title.y1 <= fig.bbox.height


def test_the_title_says_what_the_runs_cover_so_a_demo_is_not_read_as_federated_evidence(tmp_path):
    fed = [r | dict(num_clients=100, clients_per_round=10) for s in range(5) for r in _rows(f"f{s}", s, 20, 0.7)]
    demo = [r | dict(dataset="digits", partition="iid", model="mlp_small", num_clients=10, clients_per_round=10)
            for r in _rows("d", 0, 20, 0.9) + [dict(_rows("d", 0, 20, 0.9)[1], round=2)]]
    assert report.scope(pd.DataFrame(fed)) == ("fashion_mnist (shards) · lenet · 100 clients, 10 a round · "
                                               "2 rounds · seeds 0-4")
    both = report.scope(pd.DataFrame(fed + demo))
    assert both == ("digits (iid); fashion_mnist (shards) · lenet, mlp_small · 10 clients, all every round; "
                    "100 clients, 10 a round · 2, 3 rounds · seeds 0-4")
    odd = [r | dict(num_clients=100, clients_per_round=10) for s in (0, 2) for r in _rows(f"o{s}", s, 20, 0.7)]
    assert report.scope(pd.DataFrame(odd)).endswith("· seeds 0, 2")
    assert report.scope(pd.DataFrame(_rows("x", 0, 20, 0.7))) == "fashion_mnist (shards) · lenet · 2 rounds · seed 0"
    rows = pd.DataFrame(fed)
    md = report.markdown(report.table(report.per_run(rows, 0.6)), [], 0.6, "cmd", "", report.scope(rows))
    assert md.splitlines()[0] == "# Top-k results: " + report.scope(rows)


def test_wire_seconds_are_the_counted_bytes_at_the_links_rates_plus_a_round_trip_per_exchange(tmp_path):
    masked = pd.DataFrame(_rows("m", 0, 20, 0.7)).assign(
        **{c: 0.1 for c in report.STEPS}, bytes_up_per_client=125_000.0, bytes_down_per_client=250_000.0)
    masked.loc[1, ["t_step_masked_input", "t_step_unmask"]] = np.nan  # a round aborted after its sketch exchange
    plain = pd.DataFrame(_rows("p", 0, 20, 0.8)).assign(secagg="none", index_policy="per-client",
                                                         field_bits=np.nan, bytes_up_per_client=125_000.0,
                                                         bytes_down_per_client=250_000.0)
    assert report.round_trips(masked).tolist() == [6, 4]
    assert report.round_trips(plain).tolist() == [1, 1]  # no step columns at all: plain rounds
    assert report.round_trips(masked.drop(columns=report.STEPS)).isna().all()  # masked rows from before the steps
    t = report.table(report.per_run(pd.concat([masked, plain]), 0.6)).set_index("secagg")
    link = report.parse_link("10,50,40")
    wire = report.wire_seconds(t, link)
    # 1 Mbit up at 10 Mbit/s, 2 Mbit down at 50: 0.1 + 0.04 s, then 5 (masked: mean of 6 and 4) or 1 round trips
    assert wire["dh"] == pytest.approx(0.14 + 5 * 0.04) and wire["none"] == pytest.approx(0.14 + 0.04)
    t[report.wire_column(link)] = wire
    md = report.markdown(t.reset_index(), [], 0.6, "cmd", links=(link,))
    assert "| wire s, 10/50 Mbit/s, 40 ms | round trips |" in md and "| 0.340 | 5 |" in md and "| 0.180 | 1 |" in md
    assert "not a measurement" in md
    assert "wire s" not in report.markdown(t.reset_index(), [], 0.6, "cmd")  # only where a link is asked for


@pytest.mark.parametrize("text", ["10,50", "10,50,0", "a,b,c", "10,-1,5", "10,inf,5"])
def test_a_link_that_is_not_three_positive_numbers_is_refused_naming_the_format(text, capsys, tmp_path):
    with pytest.raises(SystemExit):  # --out in tmp_path: were the link taken, nothing lands in the repo's results/
        report.main(["results", "--link", text, "--out", str(tmp_path)])
    assert "expected UP,DOWN,RTT (Mbit/s, Mbit/s, ms), all > 0" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["-1", "0", "1.5", "nan", "high"])
def test_a_target_that_is_no_accuracy_is_refused(text, capsys, tmp_path):
    """--target -1 was taken, and every run 'reached' it in round 1."""
    with pytest.raises(SystemExit):
        report.main(["results", "--target", text, "--out", str(tmp_path)])
    assert "expected an accuracy in (0, 1]" in capsys.readouterr().err


def test_a_run_copied_into_two_folders_counts_once_not_as_one_run_of_twice_its_rounds(tmp_path, capsys):
    """Rows were keyed by run_id alone: a run in both folders became one run of 4 rounds, a line of its own."""
    for folder in ("runs", "block_runs"):
        _write_run(tmp_path / folder, "a", _rows("a", 0, 20, 0.7), _config())
    rows, _ = report.load([str(tmp_path / "runs"), str(tmp_path / "block_runs")])
    assert len(rows) == 2
    t = report.table(report.per_run(rows, 0.6))
    assert len(t) == 1 and (t["seeds"].iloc[0], t["runs"].iloc[0], t["rounds"].iloc[0]) == (1, 1, 2)
    assert "counted once" in capsys.readouterr().err


def test_a_key_an_older_config_lacks_reads_as_its_value_before_it_existed_and_splits_the_setting(tmp_path):
    """A bounded run pooled as a seed of unbounded runs written before fl.max_update_norm existed."""
    _write_run(tmp_path, "a", _rows("a", 0, 20, 0.7), _config())
    bounded = _config()
    bounded["fl"]["max_update_norm"] = 10.0
    _write_run(tmp_path, "b", [dict(r, run_id="b", seed=1) for r in _rows("b", 1, 20, 0.1)], {**bounded, "seed": 1})
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6)).set_index("other")
    assert sorted(t.index) == ["fl.max_update_norm=10.0", "fl.max_update_norm=null"]
    assert (t["seeds"] == 1).all() and t.loc["fl.max_update_norm=10.0", "accuracy"] == pytest.approx(0.1)


def test_cumulative_upload_is_per_client_of_the_population_as_the_upload_to_target():
    """The bytes plot summed bytes per cohort client over every round: 10x a client's upload at 10 of 100 a round."""
    rows = pd.DataFrame(_rows("a", 0, 20, 0.7))  # 20,000 bytes a round from the cohort, 100 clients
    run = report.per_run(rows, 0.0).iloc[0]
    assert run["upload_total_per_client"] == pytest.approx(2 * 20000 / 100)
    assert run["upload_to_target"] == pytest.approx(20000 / 100)  # reached at round 0


def test_rounds_to_target_count_from_one_and_the_upload_to_target_includes_the_round_that_reached_it():
    rows = pd.DataFrame(_rows("a", 0, 20, 0.7))  # accuracy 0.6 after round 0, 0.7 after round 1
    first, second = report.per_run(rows, 0.55).iloc[0], report.per_run(rows, 0.65).iloc[0]
    assert (first["rounds_to_target"], second["rounds_to_target"]) == (1, 2)
    assert second["upload_to_target"] == pytest.approx(2 * 20000 / 100)
    assert np.isnan(report.per_run(rows, 0.75).iloc[0]["rounds_to_target"])  # never reached


def test_rows_without_an_aborted_column_aborted_nothing_and_a_run_never_evaluated_does_not_stop_the_report():
    old = pd.DataFrame(_rows("old", 0, 20, 0.7))
    new = pd.DataFrame(_rows("new", 1, 20, 0.7)).assign(run_id="new", aborted=[False, True])
    runs = report.per_run(pd.concat([old, new], ignore_index=True), 0.6).set_index("seed")
    assert (runs.loc[0, "aborted_rounds"], runs.loc[1, "aborted_rounds"]) == (0, 1)
    blank = pd.DataFrame(_rows("blank", 2, 20, 0.7)).assign(run_id="blank", accuracy=np.nan)
    run = report.per_run(blank, 0.6).iloc[0]
    assert np.isnan(run["final_accuracy"]) and np.isnan(run["rounds_to_target"])


def test_a_label_names_its_folder_however_spelt_and_one_for_a_folder_not_reported_is_refused(tmp_path, monkeypatch):
    """`--label ./runs=x` was matched against `runs` as typed, and silently not applied."""
    _write_run(tmp_path / "runs", "a", _rows("a", 0, 20, 0.7), _config())
    monkeypatch.chdir(tmp_path)
    report.main(["runs/", "--label", "./runs=fashion_mnist_seed3", "--out", "out"])
    assert "fashion_mnist_seed3" in (tmp_path / "out" / "topk_table.md").read_text()
    with pytest.raises(SystemExit, match="--label names a folder not reported: other"):
        report.main(["runs", "--label", "other=x", "--out", "out"])


def test_a_label_may_name_a_folder_with_an_equals_sign_and_hold_one(tmp_path, monkeypatch):
    """`--label runs/alpha=0.1=Dirichlet` was split at its first '=' and refused as naming folder runs/alpha."""
    _write_run(tmp_path / "runs" / "alpha=0.1", "a", _rows("a", 0, 20, 0.7), _config())
    _write_run(tmp_path / "other", "b", _rows("b", 0, 20, 0.7), _config())
    monkeypatch.chdir(tmp_path)
    report.main(["runs/alpha=0.1", "other", "--label", "runs/alpha=0.1=Dirichlet 0.1", "--label", "other=lr=0.1",
                 "--out", "out"])
    table = (tmp_path / "out" / "topk_table.md").read_text()
    assert "| Dirichlet 0.1 (shards) |" in table and "| lr=0.1 (shards) |" in table


def _two_dense_runs_at_two_dropout_rates(tmp_path):
    """Dense runs d0 (no dropouts, accuracy 0.8) and d5 (secagg.dropout=0.05, 0.7)."""
    for name, dropout, accuracy in (("d0", 0.0, 0.8), ("d5", 0.05, 0.7)):
        rows = [dict(r, run_id=name, compression="none", ratio=1.0, secagg="none", index_policy="dense",
                     field_bits=np.nan) for r in _rows(name, 0, 20, accuracy)]
        _write_run(tmp_path, name, rows, _config(dropout=dropout))


def test_a_masked_line_under_dropouts_is_compared_with_the_dense_baseline_under_the_same_dropouts(tmp_path):
    """secagg.dropout acts on plain rounds too: it is part of a line's baseline, not of its masking."""
    _two_dense_runs_at_two_dropout_rates(tmp_path)
    _write_run(tmp_path, "m5", _rows("m5", 0, 20, 0.65), _config(dropout=0.05))
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6))
    masked = t[t["secagg"] == "dh"].iloc[0]
    assert masked["accuracy_change"] == pytest.approx(-0.05) and "secagg.dropout=0.05" in masked["other"]
    assert sorted(t[t["secagg"] == "none"]["other"]) == ["secagg.dropout=0.0", "secagg.dropout=0.05"]


def test_a_line_finds_its_dense_baseline_among_several_though_only_one_of_them_spells_a_newer_key(tmp_path):
    """Masked dense rerun with fl.max_update_norm: null in its config.json, beside dense runs written before the
    key existed at two dropout rates (results/fmnist/dirichlet: two alphas): no line was alike, so Δ and x dense
    were blank."""
    _two_dense_runs_at_two_dropout_rates(tmp_path)
    newer = _config(dropout=0.05)
    newer["fl"]["max_update_norm"] = None
    _write_run(tmp_path, "m5", _rows("m5", 0, 20, 0.65), newer)
    t = report.table(report.per_run(report.load([str(tmp_path)])[0], 0.6))
    masked = t[t["secagg"] == "dh"].iloc[0]
    assert masked["accuracy_change"] == pytest.approx(-0.05) and masked["up_vs_dense"] == pytest.approx(1.0)


def test_a_line_whose_only_dense_run_ran_at_another_setting_has_no_baseline_unless_a_key_is_only_older(tmp_path):
    """The only dense line of a data and model was every line's baseline: top-k under 20% dropouts (or at server
    momentum 0.5, results/fmnist/clients_500) was set against dense without them, in Δ and in x dense."""
    dense = [dict(r, run_id="d", compression="none", ratio=1.0, secagg="none", index_policy="dense",
                  field_bits=np.nan, bytes_up_per_client=1000) for r in _rows("d", 0, 20, 0.8)]
    _write_run(tmp_path, "d", dense, {**_config(), "fl": {"lr": 0.1, "rounds": 2, "max_update_norm": None}})
    _write_run(tmp_path, "m", _rows("m", 0, 20, 0.6), _config(dropout=0.2))
    # written before fl.max_update_norm existed: compared with the dense run all the same
    _write_run(tmp_path, "o", [dict(r, run_id="o", ratio=0.1) for r in _rows("o", 0, 20, 0.7)], _config())
    t = report.table(report.per_run(report.load([str(tmp_path)])[0], 0.6)).set_index("ratio")
    assert t.loc[0.02, ["accuracy_change", "up_vs_dense", "down_vs_dense"]].isna().all()
    assert t.loc[0.1, "accuracy_change"] == pytest.approx(-0.1) and t.loc[0.1, "up_vs_dense"] == pytest.approx(2.0)


def test_a_line_at_another_server_momentum_than_the_only_dense_run_has_no_baseline(tmp_path):
    """A key older rows lack (fl.server_momentum) reads as its old value only where a config lacks it: a run that
    set it is not compared with a dense run at the old value."""
    dense = [dict(r, run_id="d", compression="none", ratio=1.0, secagg="none", index_policy="dense",
                  field_bits=np.nan, bytes_up_per_client=1000) for r in _rows("d", 0, 20, 0.8)]
    _write_run(tmp_path, "d", dense, _config())
    momentum = _config()
    momentum["fl"]["server_momentum"] = 0.5
    _write_run(tmp_path, "p", _rows("p", 0, 20, 0.6), momentum)
    t = report.table(report.per_run(report.load([str(tmp_path)])[0], 0.6)).set_index("ratio")
    assert t.loc[0.02, ["accuracy_change", "up_vs_dense", "down_vs_dense"]].isna().all()


def test_a_key_in_which_a_line_differs_from_its_dense_runs_is_named_though_no_pool_holds_both_values(tmp_path):
    """Top-k run at lr 0.05 and dropout 0.2 beside dense at lr 0.1 and none: no pool held two values of a key, so
    the table named none, and read as top-k costing what the lr and the dropouts cost."""
    dense = [dict(r, run_id="d", compression="none", ratio=1.0, secagg="none", index_policy="dense",
                  field_bits=np.nan) for r in _rows("d", 0, 20, 0.8)]
    _write_run(tmp_path, "d", dense, _config(lr=0.1))
    _write_run(tmp_path, "m", _rows("m", 0, 20, 0.6), {**_config(lr=0.05, dropout=0.2), "seed": 1})
    _write_run(tmp_path, "n", _rows("n", 1, 20, 0.6), {**_config(lr=0.05, dropout=0.2), "seed": 1})
    rows, _ = report.load([str(tmp_path)])
    assert rows.groupby("run_id")["other"].first().to_dict() == {
        "d": "fl.lr=0.1, secagg.dropout=0.0", "m": "fl.lr=0.05, secagg.dropout=0.2",
        "n": "fl.lr=0.05, secagg.dropout=0.2"}  # the seed is no setting


@pytest.mark.filterwarnings("ignore:No artists with labels")  # bar and scatter are replaced: nothing is drawn
def test_the_time_breakdown_never_averages_runs_of_other_environments_or_lengths(tmp_path, monkeypatch):
    """niid_bench's bars averaged a 50-round inline run with a 10-round Ray run of one setting (170.7 s of
    training, which neither took); each is its own bar now, with its round's wall time marked."""
    runs = pd.DataFrame([_run("none", "per-client", 0.01, 0.7) | {s: 0.0 for s in report.STAGES}
                         | dict(env=env, rounds=rounds, seed=0, other="", t_train=train, t_round=train + 1.0)
                         for env, rounds, train in (("cpu, inline x1", 50, 82.0), ("cpu, ray x2", 10, 260.0))])
    bars = []
    monkeypatch.setattr(report_plots.plt.Axes, "barh", lambda self, y, w, **kw: bars.append((kw["label"], list(w))))
    monkeypatch.setattr(report_plots.plt.Axes, "scatter", lambda self, x, y, **kw: bars.append((kw["label"], list(x))))
    report_plots.plot_time_breakdown(runs, tmp_path / "t.png")
    drawn = dict(bars)
    assert drawn["train"] == [82.0, 260.0] and drawn["round (wall)"] == [83.0, 261.0]


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_a_ratio_whose_runs_have_no_accuracy_is_not_drawn_at_zero_and_a_dense_only_masked_line_is_named(
        tmp_path, monkeypatch):
    runs = pd.DataFrame([_run("none", "dense", 1.0, 0.80, "none"), _run("none", "per-client", 0.1, 0.75),
                         _run("none", "per-client", 0.01, np.nan), _run("dh", "all", 1.0, 0.79, "none")])
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar",
                        lambda self, x, y, **kw: drawn.append((kw["label"], list(x), list(y))))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    lines = {label: (x, y) for label, x, y in drawn}
    plain = next(v for k, v in lines.items() if "dh" not in k)
    assert plain == ([0.1, 1.0], [0.75, 0.80])  # 0.01 left out, not a point at 0
    assert any(k.endswith(", dh (dense)") for k in lines) and not any("None" in k for k in lines)


def test_the_table_names_the_host_of_each_line():
    rows = pd.DataFrame(_rows("a", 0, 20, 0.66) + _rows("b", 1, 20, 0.68) + _rows("c", 0, 12, 0.67))
    rows["env_cpu"] = ["AMD EPYC"] * 4 + ["Intel Xeon"] * 2
    md = report.markdown(report.table(report.per_run(rows, target=0.6)), [], 0.6, "cmd")
    assert "A = AMD EPYC; B = Intel Xeon" in md
    line12, line20 = (next(x for x in md.splitlines() if f"| {b} | " in x and x.startswith("| cpu")) for b in (12, 20))
    assert "| B |" in line12 and "| A |" in line20


def test_environments_are_compared_only_on_one_host():
    """An inline run on one CPU and a Ray run on another stood side by side as 'Ray takes twice as long', where the
    table says seconds compare only between lines of one host."""
    def line(run_id, env, cpu, seconds):
        return [dict(r, env=env, env_cpu=cpu, t_round=seconds) for r in _rows(run_id, 0, 20, 0.7)]

    def compared(rows):
        md = report.markdown(report.table(report.per_run(pd.DataFrame(rows), 0.6)), [], 0.6, "cmd")
        return md.split("## Environments compared (seconds per round)")[1].strip()

    inline = line("a", "cpu, inline x2", "Intel Xeon", 0.1)
    assert compared(inline + line("b", "cpu, ray x2", "AMD EPYC", 0.2)) == \
        "No setting ran in more than one environment on one host."
    one_host = compared(inline + line("c", "cpu, ray x2", "Intel Xeon", 0.3))
    assert [[c.strip() for c in x.split("|")[-4:-1]] for x in one_host.splitlines() if "fresh" in x] == \
        [["A", "0.1", "0.3"]]  # the host, lettered as in the table


def test_fresh_with_the_count_sketch_summary_is_named_so_not_read_as_the_default_policy(tmp_path):
    """Its rows say plain `fresh` (every other summary names itself, as `fresh(marginals)` the default does)."""
    run = tmp_path / "sketch"
    run.mkdir()
    rows = pd.DataFrame(_rows("a", 0, 20, 0.7))
    rows["index_policy"] = "fresh"
    rows.to_csv(run / "rounds.csv", index=False)
    _mark_done(run)
    loaded, _ = report.load([str(tmp_path)])
    assert set(loaded["index_policy"]) == {"fresh(sketch)"}


def test_a_codec_on_the_broadcast_only_is_named_so_with_the_server_keeping_its_error(tmp_path, monkeypatch):
    """Clients of `compression.client=false` send every entry (recorded `dense`, or `all` masked): read as plain
    `dense`/`no EF`, its top-k line looked like the dense baseline's uploads under top-k's name with no error kept."""
    def run(name, seed, secagg, policy, client, compression="topk", ef=False):
        rows = [dict(r, run_id=name, seed=seed, secagg=secagg, index_policy=policy, compression=compression,
                     client_compression=client, server_compression=compression != "none", error_feedback=ef,
                     field_bits=20 if secagg != "none" else np.nan) for r in _rows(name, seed, 20, 0.7)]
        _write_run(tmp_path, name, rows, _config())

    run("a", 0, "none", "dense", False)
    run("b", 1, "none", "dense", False)
    run("c", 0, "dh", "all", False)
    run("d", 0, "none", "per-client", True, ef=True)
    run("e", 0, "none", "dense", False, compression="none")
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6))
    assert sorted(t["index_policy"]) == ["all, compressed broadcast", "dense", "dense, compressed broadcast",
                                         "per-client"]
    assert t.set_index("index_policy").loc["dense, compressed broadcast", "seeds"] == 2
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| topk | 0.02 | server | none | dense, compressed broadcast |" in md
    assert "| topk | 0.02 | server | dh | all, compressed broadcast |" in md
    assert "| none | 0.02 | off | none | dense |" in md and "`server` on a line" in md
    assert "`server` on a line" not in report.markdown(t[~t["index_policy"].str.contains("broadcast")], [], 0.6, "c")
    assert sorted(report.setting_names(t)) == ["none", "topk 0.02", "topk 0.02 + dh (all, compressed broadcast)",
                                               "topk 0.02 on the broadcast only"]


def test_a_masked_run_under_memory_aggregation_names_its_policy_its_summary_bits_then_memory(tmp_path):
    config = _config(quant_bits=16)
    config["compression"]["sketch_quant_bits"] = 8
    config["fl"]["aggregation"] = "memory"
    _write_run(tmp_path, "a", _rows("a", 0, 20, 0.7), config)
    assert set(report.load([str(tmp_path)])[0]["index_policy"]) == {"fresh(marginals), summary 8 bits, memory"}


@pytest.mark.filterwarnings("ignore:No artists with labels")  # errorbar is replaced: nothing to put in a legend
def test_a_codec_on_the_broadcast_only_under_memory_aggregation_is_still_named_broadcast_only(tmp_path, monkeypatch):
    """`, memory` goes last, after `, compressed broadcast`: read by its end alone, the line of dense uploads looked
    like top-k's uploads, with clients said to keep memories of codec differences they never sent, and was drawn
    as a top-k point in the ratio plot."""
    config = _config()
    config["fl"]["aggregation"] = "memory"
    for name, codec, server in (("a", "topk", True), ("d", "none", False)):
        rows = [dict(r, run_id=name, compression=codec, secagg="none", index_policy="dense", client_compression=False,
                     server_compression=server, error_feedback=False, field_bits=np.nan)
                for r in _rows(name, 0, 20, 0.7)]
        _write_run(tmp_path, name, rows, config)
    runs = report.per_run(report.load([str(tmp_path)])[0], 0.6)
    t = report.table(runs[runs["compression"] == "topk"])
    assert list(t["index_policy"]) == ["dense, compressed broadcast, memory"]
    assert list(report.setting_names(t)) == ["topk 0.02 on the broadcast only"]
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| topk | 0.02 | server | none | dense, compressed broadcast, memory |" in md and "`server` on a line" in md
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar", lambda self, x, y, **kw: drawn.append(list(x)))
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    assert drawn == [[1.0]]  # the dense run alone


@pytest.mark.filterwarnings("ignore:No artists with labels")  # errorbar is replaced: nothing to put in a legend
def test_a_run_under_memory_aggregation_is_named_so_and_its_ef_column_says_memory(tmp_path, monkeypatch):
    """Its clients keep memories, not residuals (error_feedback false in its rows): read as `off` and `no EF`, the
    line looked like top-k with nothing kept, and the ratio plot left it out."""
    def run(name, aggregation):
        rows = [dict(r, run_id=name, error_feedback=aggregation == "cohort", secagg="none", index_policy="per-client",
                     field_bits=np.nan) for r in _rows(name, 0, 20, 0.7)]
        config = _config()
        config["fl"]["aggregation"] = aggregation
        _write_run(tmp_path, name, rows, config)

    run("a", "cohort")
    run("b", "memory")
    rows, _ = report.load([str(tmp_path)])
    t = report.table(report.per_run(rows, 0.6))
    assert sorted(t["index_policy"]) == ["per-client", "per-client, memory"]
    md = report.markdown(t, [], 0.6, "cmd")
    assert "| topk | 0.02 | memory | none | per-client, memory |" in md and "EF `memory`" in md
    assert "| topk | 0.02 | on | none | per-client |" in md
    assert not any(name.endswith("no EF") or "no EF," in name for name in report.setting_names(t))
    assert "EF `memory`" not in report.markdown(t[t["index_policy"] == "per-client"], [], 0.6, "cmd")
    drawn = []
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar", lambda self, x, y, **kw: drawn.append(kw["label"]))
    report_plots.plot_accuracy_vs_ratio(report.per_run(rows, 0.6), tmp_path / "plot.png")
    assert len(drawn) == 2  # the memory line is drawn beside the cohort one


def test_a_stage_is_averaged_over_every_round_of_its_run_a_round_that_had_none_of_it_counting_0_s():
    """Rounds where every client was lost (or a masked round aborted before a stage) leave the stage blank: its seconds
    per round are over all the run's rounds, as t_round's are, not over the rounds that had it; a stage the run never
    has (t_mask without masking) stays blank."""
    rows = pd.DataFrame(_rows("a", 0, 20, 0.66))
    rows["t_encode"], rows["t_decode"], rows["t_mask"] = [0.2, np.nan], [np.nan, 0.4], np.nan
    run = report.per_run(rows, target=0.6).iloc[0]
    assert run["t_encode"] == pytest.approx(0.1) and run["t_decode"] == pytest.approx(0.2)
    assert np.isnan(run["t_mask"]) and np.isnan(report.table(report.per_run(rows, 0.6))["mask_s"].iloc[0])


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_the_time_breakdown_names_each_bar_level_in_the_tables_order_inside_the_figure(tmp_path, monkeypatch):
    """Names of 150 characters were tick labels at 70 degrees under the bars, and the legend sat on the first bars:
    the bars lie along the seconds axis, each named level on its left, top down, and the legend beside the axes."""
    stages = {s: 0.1 for s in report.STAGES}
    cpus = [f"Intel(R) Xeon(R) Processor (family 6, model {m}; AVX-512)" for m in (106, 143, 167, 207)]
    runs = pd.DataFrame([_run("none", "per-client", r, 0.7) | stages | dict(seed=0, t_round=1.0, other=other,
                                                                             host=cpus[i])
                         for i, (r, other) in enumerate(((0.1, ""), (0.01, "compression.server=false, "
                                                         "dataset.alpha=0.1, fl.aggregation=memory, fl.prox_mu=0.1, "
                                                         "fl.server_lr=2.0, fl.server_momentum=0.5, "
                                                         "secagg.threshold=null"), (0.02, ""), (0.03, "")))])
    made = _figures(monkeypatch)
    report_plots.plot_time_breakdown(runs, tmp_path / "time.png")
    (fig, ax), = made
    labels = ax.get_yticklabels()
    ratios = [t.get_text().split(" topk ")[1].split()[0].rstrip(",") for t in labels]
    assert ratios == ["0.01", "0.02", "0.03", "0.1"]  # top down, as the table sorts them
    assert all(t.get_rotation() == 0 for t in labels) and ax.yaxis_inverted()
    assert "D =" in ax.get_xlabel() and "model 207" in ax.get_xlabel()  # four hosts, lettered
    renderer = fig.canvas.get_renderer()
    for artist in [*labels, ax.get_legend(), ax.xaxis.label]:
        box = artist.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # nothing cut off at either side
    legend, axes_box = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes_box.x1  # beside the bars, not over them


def test_the_time_breakdown_never_says_the_setup_is_in_a_rounds_other_time(tmp_path, monkeypatch):
    """t_setup (starting the pool, before round 0) is not part of any t_round, so not of the bar's `other`."""
    runs = pd.DataFrame([dict(_run("none", "dense", 1.0, 0.8, "none"), t_train=1.0, t_encode=0.1, t_mask=np.nan,
                              t_aggregate=0.1, t_decode=np.nan, t_evaluate=0.5, t_round=2.0)])
    titles = []
    monkeypatch.setattr(report_plots.plt.Axes, "set_title", lambda self, text, **kw: titles.append(text))
    report_plots.plot_time_breakdown(runs, tmp_path / "time.png")
    assert "other" in titles[0] and "setup" not in titles[0]


def test_runs_as_the_simulation_writes_them_are_read_every_column_of_names_as_text(tmp_path):
    """The report refuses a name where it reads numbers: a column of names the rows gained (`aggregation`) stopped
    it on every run written since, while the tests' hand-made rows lacked it."""
    import fl

    for aggregation in ("cohort", "memory"):
        fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=2",
                           "secagg=none", "compression.ratio=0.1", f"fl.aggregation={aggregation}"]))
    rows, _ = report.load([str(tmp_path)])
    assert set(rows["aggregation"]) == {"cohort", "memory"}
    assert len(report.table(report.per_run(rows, 0.6))) == 2


@pytest.mark.filterwarnings("ignore:No artists with labels")  # plotting is replaced: nothing to put in a legend
def test_runs_of_different_environments_are_separate_lines_in_every_plot_as_in_the_table(tmp_path, monkeypatch):
    """The table kept cpu and cuda runs apart; the plots averaged them (one point between the two, its error bar
    the gap between the environments)."""
    for seed in (0, 1):
        _write_run(tmp_path, f"cpu{seed}", _rows(f"cpu{seed}", seed, 20, 0.7), _config())
        _write_run(tmp_path, f"gpu{seed}", [r | {"env": "cuda"} for r in _rows(f"gpu{seed}", seed, 20, 0.5)],
                   _config())
    rows, _ = report.load([str(tmp_path)])
    runs = report.per_run(rows, 0.9)
    assert len(report.table(runs)) == 2
    drawn = []
    record = lambda self, x, y, *a, **kw: drawn.append((kw["label"], np.asarray(y).round(3).tolist(), kw.get("yerr")))
    monkeypatch.setattr(report_plots.plt.Axes, "errorbar", record)
    monkeypatch.setattr(report_plots.plt.Axes, "plot", record)
    report_plots.plot_accuracy_vs_ratio(runs, tmp_path / "ratio.png")
    report_plots.plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png")
    report_plots.plot_accuracy_vs_round(rows, tmp_path / "round.png")
    assert len(drawn) == 6 and {y[-1] for _, y, _ in drawn} == {0.7, 0.5}
    assert {label.endswith("[cpu]") for label, _, _ in drawn} == {True, False}
    assert sum(label.endswith("[cuda]") for label, _, _ in drawn) == 3
    # the error bars go to matplotlib as arrays (a one-point Series made pandas 2 warn)
    assert all(isinstance(part, np.ndarray) for _, _, yerr in drawn if yerr is not None for part in yerr)


def test_a_folder_given_twice_or_inside_another_lists_its_unfinished_runs_once_under_its_own_label(
        tmp_path, monkeypatch, capsys):
    """Unfinished runs were listed (and counted) once per folder that reached them; a label on the inner of two
    nested folders held only when it came first; the same run reached twice was reported as in two places."""
    _write_run(tmp_path / "runs", "a", _rows("a", 0, 20, 0.7), _config())
    cut = tmp_path / "runs" / "b"
    cut.mkdir()
    pd.DataFrame(_rows("b", 1, 20, 0.7)).to_csv(cut / "rounds.csv", index=False)
    early = tmp_path / "runs" / "c"
    early.mkdir()
    (early / "failed-c.txt").write_text("ValueError: before its first round\n")
    monkeypatch.chdir(tmp_path)
    for dirs in (["runs", "runs"], [".", "runs"], ["runs", "."]):
        rows, incomplete = report.load(dirs)
        assert len(rows) == 2 and sorted(p.parent.name for p in incomplete) == ["b", "c"]
    assert "counted once" not in capsys.readouterr().err
    for dirs in (["runs", "."], [".", "runs"]):
        report.main([*dirs, "--label", "runs=inner", "--label", ".=outer", "--out", "out", "--force"])
        assert "| inner (shards) |" in (tmp_path / "out" / "topk_table.md").read_text()


def test_report_options_given_twice_or_out_under_a_file_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    _write_run(tmp_path / "runs", "a", _rows("a", 0, 20, 0.7), _config())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    for args, message in ((["--link", "10,50,50", "--link", "10,50,50"], "--link: 10/50 Mbit/s, 50 ms given more "),
                          (["--label", "runs=one", "--label", "runs/=two"], "--label names runs/ twice: one and two"),
                          (["--out", "file/sub"], "--out file/sub: file is a file")):
        with pytest.raises(SystemExit):
            report.main(["runs", *args] + ([] if "--out" in args else ["--out", "out"]))
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    report.main(["runs", "--label", "runs=one", "--label", "./runs=one", "--out", "out"])  # one name, twice spelt


def test_runs_apart_only_in_backend_workers_or_cores_share_a_plotted_line_as_their_results_are_identical():
    """Inline and Ray runs compute the same numbers: one line (the table splits them for their seconds); another
    torch or device does not."""
    runs = pd.DataFrame([_run("none", "per-client", 0.1, 0.7) | {"env": f"cpu, {backend} x2, 2 cores, torch 2",
                                                                  "device": "cpu", "env_torch": "2"}
                         for backend in ("inline", "ray")])
    assert report_plots.envs_apart(runs) is runs
    moved = report_plots.envs_apart(runs.assign(env_torch=["2", "3"], other=["fl.lr=0.2", ""]))
    assert moved["other"].tolist() == ["fl.lr=0.2 [cpu, torch 2]", "[cpu, torch 3]"]
