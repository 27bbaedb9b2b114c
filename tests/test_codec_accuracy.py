"""experiments.codec_accuracy: each line runs what its label says (the codec, masking, error feedback, as the run's
plan records them), one dense baseline, and the table describes its setting."""
import math

import pandas as pd

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


def test_the_table_describes_the_setting_under_the_command_that_makes_it(tmp_path, monkeypatch):
    def run_grid(settings, seeds, backend, runs_dir):
        return pd.DataFrame([{"setting": label, "seed": seed, "partition": "iid", "host": "cpu",
                              "compression": "none" if label == codec_accuracy.DENSE else label.split()[0],
                              "ratio": 0.01, "secagg": "dh" if "secagg=dh" in overrides else "none",
                              "policy_ran": "p", "accuracy": 0.9, "bytes_up": 1e6, "bytes_down": 1e6,
                              "s_per_round": 0.1} for label, overrides in settings for seed in seeds])

    monkeypatch.setattr(codec_accuracy, "run_grid", run_grid)
    codec_accuracy.main(["--seeds", "0", "--out", str(tmp_path / "t")])
    md = (tmp_path / "t.md").read_text()
    assert md.startswith("# Every codec at ratio 0.01 against dense\n\nRegenerate: `python -m "
                         f"experiments.codec_accuracy --seeds 0 --out {tmp_path / 't'}`\n\ndigits, 10 IID clients, 20 "
                         "rounds, mlp_large,")
