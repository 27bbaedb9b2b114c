"""experiments.codec_accuracy: each line runs what its label says (the codec, masking, error feedback, as the run's
plan records them), one dense baseline, and the table describes its setting."""
import math

import pandas as pd
import pytest

import fl
from experiments import codec_accuracy
from fl.config import validate
from fl.plan import Plan

SHAPES = [(64, 64), (64,), (10, 64), (10,)]


def test_each_line_runs_the_codec_masking_and_error_feedback_its_label_names():
    seen = {}
    for label, overrides in codec_accuracy.settings(0.01):
        plan = Plan.build(validate(fl.compose(overrides)), [math.prod(s) for s in SHAPES], SHAPES)
        seen[label] = (plan.client_codec.name, plan.masked, plan.error_feedback)
    assert seen.pop(codec_accuracy.DENSE) == ("none", False, False)
    assert "none" not in {codec for codec, _, _ in seen.values()}  # one dense baseline: summarize refuses two
    for label, (codec, masked, feedback) in seen.items():
        assert label.split()[0] == codec, label
        assert masked == ("under dh masking" in label), label
    assert seen["topk"][2] and not seen["topk without error feedback"][2]
    assert set(codec_accuracy.compression.names()) - {"none"} <= set(seen)  # every registered codec has its line


@pytest.mark.parametrize("name, split", [("fmnist", ("dirichlet", 0.5)), ("fmnist_shards", ("shards", 2))])
def test_the_fmnist_presets_run_every_line_at_federated_scale_on_real_data(name, split):
    preset = codec_accuracy.PRESETS[name]
    digits = dict(codec_accuracy.settings(0.01))
    lines = dict(codec_accuracy.settings(0.01, preset["base"]))
    assert list(lines) == list(digits)  # the same lines, each with the preset's setting before its own overrides
    for label, overrides in lines.items():
        assert overrides == [*preset["base"], *digits[label]]
        cfg = validate(fl.compose(overrides))
        by = cfg.dataset.alpha if split[0] == "dirichlet" else cfg.dataset.shards_per_client
        assert (cfg.dataset.name, cfg.dataset.partition, by, cfg.model.name) == ("fashion_mnist", *split, "lenet")
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round, cfg.fl.rounds) == (100, 10, 50), label
    assert preset["runs_dir"].startswith("results/fmnist/")  # committed beside the other Fashion-MNIST runs


def _fake_grid(settings, seeds, backend, runs_dir):
    return pd.DataFrame([{"setting": label, "seed": seed, "partition": "iid", "host": "cpu",
                          "compression": "none" if label == codec_accuracy.DENSE else label.split()[0],
                          "ratio": 0.01, "secagg": "dh" if "secagg=dh" in overrides else "none",
                          "policy_ran": "p", "accuracy": 0.9, "bytes_up": 1e6, "bytes_down": 1e6,
                          "s_per_round": 0.1} for label, overrides in settings for seed in seeds])


def test_the_table_describes_the_setting_under_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(codec_accuracy, "run_grid", _fake_grid)
    codec_accuracy.main(["--seeds", "0", "--out", str(tmp_path / "t")])
    md = (tmp_path / "t.md").read_text()
    assert md.startswith("# Every codec at ratio 0.01 against dense\n\nRegenerate: `python -m "
                         f"experiments.codec_accuracy --seeds 0 --out {tmp_path / 't'}`\n\ndigits, 10 IID clients, 20 "
                         "rounds, mlp_large, seeds 0, no masking")  # the seeds that ran, not the default's 0-2


@pytest.mark.parametrize("argv, setting", [
    ([], "digits, 10 IID clients, 20 rounds, mlp_large, seeds 0-2, no masking unless said, each codec on both sides\n"
         "with its own config"),
    (["--preset", "fmnist", "--seeds", "3", "4", "5", "6"],
     "Fashion-MNIST, lenet (107,786 parameters), 100 clients / 10 a round, Dirichlet 0.5, 1 local epoch, 50 rounds, "
     "seeds 3-6, no masking unless said"),
    (["--preset", "fmnist_shards", "--seeds", "3", "4", "5", "6"],
     "Fashion-MNIST, lenet (107,786 parameters), 100 clients / 10 a round, 2-class shards (McMahan's split: 2 "
     "label-sorted shards a client), 1 local epoch, 50 rounds, seeds 3-6, no masking unless said"),
])
def test_each_preset_describes_its_setting_and_seeds(tmp_path, monkeypatch, argv, setting):
    ran = {}

    def grid(settings, seeds, backend, runs_dir):
        ran.update(seeds=seeds, runs_dir=runs_dir)
        return _fake_grid(settings, seeds, backend, runs_dir)

    monkeypatch.setattr(codec_accuracy, "run_grid", grid)
    codec_accuracy.main([*argv, "--out", str(tmp_path / "t")])
    assert (tmp_path / "t.md").read_text().split("\n\n")[2].startswith(setting)  # the paragraph after the command
    preset = codec_accuracy.PRESETS[argv[1] if argv else "digits"]
    assert ran == {"seeds": [3, 4, 5, 6] if argv else [0, 1, 2], "runs_dir": preset["runs_dir"]}
