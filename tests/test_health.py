"""experiments.health reads from a run's rows which rounds' models stopped looking at their input."""
import json

import pandas as pd
import pytest

import fl
from experiments import health


def _run(root, name, lr, seed, tops, stds, accuracy=None, config_extra=None, done=True, loss=None):
    """A run folder whose evaluated rounds have these top-class shares and logit spreads (None: not evaluated);
    `done`: finished (a done.json naming its rows)."""
    run = root / name
    run.mkdir(parents=True)
    cfg = {"seed": seed, "dataset": {"name": "fashion_mnist", "partition": "shards"}, "secagg": {"name": "dh"},
           "compression": {"name": "topk", "ratio": 0.01, "error_feedback": True},
           "fl": {"lr": lr, "max_update_norm": None}, **(config_extra or {})}
    (run / "config.json").write_text(json.dumps(cfg))
    accuracy = accuracy or [0.1 if t is not None and t >= 0.99 else 0.6 for t in tops]
    pd.DataFrame({"run_id": name, "round": range(len(tops)),
                  "accuracy": [a if t is not None else None for a, t in zip(accuracy, tops)],
                  "loss": [(2.31 if a <= 0.1 else 1.0) if t is not None else None for a, t in zip(accuracy, tops)]
                  if loss is None else loss,
                  "logit_std": stds, "top_class_share": tops}).to_csv(run / "rounds.csv", index=False)
    if done:
        (run / "done.json").write_text(json.dumps({"run_id": name, "rounds": len(tops)}))
    return run


def test_a_run_is_collapsed_from_the_first_round_its_model_gave_one_class_to_every_image(tmp_path, capsys):
    _run(tmp_path, "dead", 0.3, 0, [0.4, 0.995, 1.0, 1.0], [1.5, 0.004, 0.0002, 0.0001])
    _run(tmp_path, "back", 0.3, 1, [0.3, 1.0, 0.6, 0.4], [1.2, 0.003, 0.4, 1.1])  # collapsed once, then recovered
    # sure of one class with logits that vary, or spreading its answers: not collapsed; round 1 not evaluated
    _run(tmp_path, "alive", 0.3, 2, [0.99, None, 0.98, 0.2], [0.5, None, 0.0001, 2.0])
    _run(tmp_path, "older", 0.1, 0, [None, None], [None, None])  # rows from before the columns: skipped
    _run(tmp_path, "running", 0.3, 3, [1.0], [0.0], done=False)  # its last rows may not be written yet: skipped
    (_run(tmp_path, "unknown", 0.3, 6, [1.0], [0.0]) / "config.json").unlink()  # no setting to pool it by: skipped
    # diverged: NaN logits (no spread), or a finite loss above ln 10 from logits that vary wildly
    _run(tmp_path, "nan", 0.3, 4, [0.3, 1.0], [1.0, float("nan")], accuracy=[0.5, 0.1], loss=[1.0, float("nan")])
    _run(tmp_path, "huge", 0.3, 5, [0.3, 0.4], [1.0, 900.0], accuracy=[0.5, 0.05], loss=[1.0, 1e3])
    table = health.main([str(tmp_path), "--out", str(tmp_path / "out" / "health")])
    err = capsys.readouterr().err
    assert "not finished" in err and "no config.json" in err and "no top_class_share" in err
    assert not {"older", "running", "unknown"} & set(table["run"])
    lines = table.set_index("run")
    columns = ["first_collapsed", "last_collapsed", "rounds_collapsed", "ended_collapsed"]
    assert lines.loc["dead", columns].tolist() == [1, 3, 3, True]
    assert lines.loc["back", columns].tolist() == [1, 1, 1, False]
    ends = ["ended_collapsed", "ended_non_finite", "ended_guessing"]
    assert lines.loc["nan", ends].tolist() == [False, True, False]
    assert lines.loc["huge", ends].tolist() == [False, False, True]
    assert lines.loc["dead", ends].tolist() == [True, False, False]  # its loss above ln 10 is named by the collapse
    assert pd.isna(lines.loc["alive", "first_collapsed"]) and lines.loc["alive", "rounds_collapsed"] == 0
    assert lines.loc["dead", "min_logit_std"] == 0.0001 and lines.loc["alive", "accuracy"] == 0.6
    text = (tmp_path / "out" / "health.md").read_text()
    assert "Regenerate: `python -m experiments.health" in text
    # five runs: collapsed at some round (dead, back), ended so (dead), non-finite (nan), guessing (huge), others
    assert "| shards, topk 0.01, secagg=dh | 5 | 2 | 1 | 1 | 1 | 0.600 |" in text  # no key differs among them
    assert len(pd.read_csv(tmp_path / "out" / "health.csv")) == 5


def test_a_setting_names_the_keys_that_differ_within_a_codec_not_those_the_codec_decides(tmp_path):
    """Dense and top-k runs differ in keys top-k alone reads (error feedback): not named; two learning rates of
    top-k are two settings, named by fl.lr (on every run: a learning rate is not the codec's); Dirichlet's alpha
    is named on Dirichlet runs only."""
    _run(tmp_path, "dense", 0.1, 0, [0.2], [1.0], config_extra={"compression": {"name": "none", "ratio": 1.0,
                                                                                "error_feedback": False}})
    _run(tmp_path, "a", 0.1, 0, [0.2], [1.0])
    _run(tmp_path, "b", 0.3, 0, [0.2], [1.0])
    _run(tmp_path, "dir", 0.1, 0, [0.2], [1.0], config_extra={"dataset": {"name": "fashion_mnist", "alpha": 0.1,
                                                                          "partition": "dirichlet"}})
    _run(tmp_path, "dir5", 0.1, 0, [0.2], [1.0], config_extra={"dataset": {"name": "fashion_mnist", "alpha": 0.5,
                                                                           "partition": "dirichlet"}})
    (tmp_path / "dense" / "config.json").write_text(  # a dense run's config keeps the alpha it does not read
        (tmp_path / "dense" / "config.json").read_text().replace('"partition": "shards"',
                                                                  '"partition": "shards", "alpha": 0.5'))
    labels = health.main([str(tmp_path)]).set_index("run")["setting"].to_dict()
    assert labels == {"dense": "shards, none 1, secagg=dh, fl.lr=0.1", "a": "shards, topk 0.01, secagg=dh, fl.lr=0.1",
                      "b": "shards, topk 0.01, secagg=dh, fl.lr=0.3",
                      "dir": "dirichlet, topk 0.01, secagg=dh, dataset.alpha=0.1, fl.lr=0.1",
                      "dir5": "dirichlet, topk 0.01, secagg=dh, dataset.alpha=0.5, fl.lr=0.1"}


def test_a_folder_of_runs_from_before_the_columns_is_refused(tmp_path):
    _run(tmp_path, "older", 0.1, 0, [None, None], [None, None])
    with pytest.raises(SystemExit, match="no run named has rows with top_class_share"):
        health.main([str(tmp_path)])
    with pytest.raises(SystemExit, match="neither a run folder"):
        health.main([str(tmp_path / "missing")])


def test_a_real_runs_rows_read_as_a_model_that_looks_at_its_input(tmp_path):
    rows = fl.run(fl.compose(["backend=inline", "model=mlp_small", "fl.rounds=2", f"results.dir={tmp_path}"]))
    (line,) = health.main([str(tmp_path)]).to_dict("records")
    assert line["rounds"] == 2 and line["rounds_collapsed"] == 0 and not line["ended_collapsed"]
    assert line["accuracy"] == rows["accuracy"].iloc[-1] and line["logit_std"] == rows["logit_std"].iloc[-1] > 0.1
