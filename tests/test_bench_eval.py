"""experiments.bench_eval: both evaluations score the same batches alike (it refuses to time them otherwise), and
the table has a line per model with its ratio."""
import pandas as pd
import pytest

from experiments import bench_eval


def test_the_benchmark_times_both_evaluations_of_each_model_and_writes_their_ratio(tmp_path):
    df = bench_eval.main(["--dataset", "digits", "--models", "lenet", "--reps", "2", "--out", str(tmp_path / "be")])
    line = df.iloc[0]
    assert (line.dataset, line.model, line.test_images, line.batches, line.reps) == ("digits", "lenet", 360, 1, 2)
    assert line.evaluation_s > 0 and line.accuracy_loss_only_s > 0
    assert line.ratio == pytest.approx(line.evaluation_s / line.accuracy_loss_only_s)
    assert line.spread_share == pytest.approx(1 - 1 / line.ratio)
    assert pd.read_csv(tmp_path / "be.csv").shape == df.shape
    text = (tmp_path / "be.md").read_text()
    assert text.startswith("# Evaluation seconds")
    assert "Regenerate: `python -m experiments.bench_eval --dataset digits" in text


def test_an_evaluation_that_scores_otherwise_than_the_baseline_is_refused(tmp_path, monkeypatch):
    real = bench_eval.accuracy_and_loss
    monkeypatch.setattr(bench_eval, "accuracy_and_loss", lambda *a: (real(*a)[0] + 0.01, real(*a)[1]))
    with pytest.raises(AssertionError, match="disagree"):
        bench_eval.main(["--dataset", "digits", "--models", "lenet", "--reps", "1", "--out", str(tmp_path / "be")])
