"""experiments.report's accuracy-vs-ratio plot: each masked index policy is its own line, never pooled."""
import pandas as pd
import pytest

from experiments import report


def _run(secagg, policy, ratio, acc, compression="topk"):
    return dict(dataset="fashion_mnist", partition="iid", model="lenet", n_params=10, rounds=30, secagg=secagg,
                compression=compression, ratio=ratio, error_feedback=True, index_policy=policy, final_accuracy=acc)


@pytest.mark.filterwarnings("ignore:No artists with labels")  # errorbar is replaced: nothing to put in a legend
def test_policies_are_separate_lines_protocols_with_equal_results_share_one_and_single_points_are_left_out(
        tmp_path, monkeypatch):
    runs = pd.DataFrame([
        _run("none", "dense", 1.0, 0.80, "none"), _run("none", "per-client", 0.1, 0.78),
        _run("none", "per-client", 0.01, 0.70),
        *[_run(s, "all", 1.0, 0.80, "none") for s in ("dh", "secaggplus")],
        *[_run(s, "fresh(marginals)", r, a) for s in ("dh", "secaggplus") for r, a in ((0.1, 0.75), (0.01, 0.60))],
        _run("dh", "fresh(exact)", 0.1, 0.77), _run("dh", "fresh(exact)", 0.01, 0.68),
        _run("dh", "randk", 0.01, 0.20),  # one ratio: no line
    ])
    drawn = []
    monkeypatch.setattr(report.plt.Axes, "errorbar",
                        lambda self, x, y, **kw: drawn.append((kw["label"], list(x), list(y))))
    report.plot_accuracy_vs_ratio(runs, tmp_path / "plot.png")
    lines = {label.split(", ", 2)[-1] if "fresh" in label else "plain": (x, y) for label, x, y in drawn}
    assert len(drawn) == 3
    assert lines["dh/secaggplus fresh(marginals)"] == ([0.01, 0.1, 1.0], [0.60, 0.75, 0.80])
    assert lines["dh fresh(exact)"] == ([0.01, 0.1, 1.0], [0.68, 0.77, 0.80])
    assert lines["plain"] == ([0.01, 0.1, 1.0], [0.70, 0.78, 0.80])
