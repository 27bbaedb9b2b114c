"""experiments.field_bits' table and its seed-by-seed gaps, from synthetic runs (no training)."""
import pandas as pd
import pytest

from experiments import field_bits


def synthetic_runs(settings, seeds, *_):
    accuracy = {"dense": 0.97, "per-client": 0.96, "masked": 0.94}
    out = []
    for label, overrides in settings:
        kind = "dense" if "compression=none" in overrides else "masked" if "secagg=dh" in overrides else "per-client"
        for seed in seeds:
            out.append({"setting": label, "seed": seed, "compression": "none" if kind == "dense" else "topk",
                        "ratio": 1.0 if kind == "dense" else 0.01, "secagg": "dh" if kind == "masked" else "none",
                        "policy_ran": kind, "accuracy": accuracy[kind] + (0.01 * seed if kind != "masked" else
                                                                           0.01 * seed - 0.002 * (seed % 2)),
                        "bytes_up": 1e6, "bytes_down": 1e6, "s_per_round": 0.1})
    return pd.DataFrame(out)


def test_the_gap_is_paired_seed_by_seed_and_the_command_names_its_arguments(tmp_path, monkeypatch):
    monkeypatch.setattr(field_bits, "run_grid", synthetic_runs)
    out = tmp_path / "fb"
    field_bits.main(["--ratios", "0.01", "--widths", "16", "--seeds", "0", "1", "2", "3", "--out", str(out)])
    md = (out.with_suffix(".md")).read_text()
    assert f"Regenerate: `python -m experiments.field_bits --ratios 0.01 --widths 16 --seeds 0 1 2 3 --out {out}`" in md
    # per seed: -2.0, -2.2, -2.0, -2.2 points (the seed's own offset cancels); mean -2.1, standard error 0.058
    line = [x for x in md.splitlines() if x.startswith("- ratio 0.01")]
    assert line == ["- ratio 0.01, masked, quant_bits 16 (field 20 bits): -2.10 ± 0.06 points against per-client "
                    "top-k (4 seeds, mean ± standard error of the per-seed differences)"]


def test_a_masked_seed_without_its_per_client_run_is_left_out():
    runs = synthetic_runs(list(field_bits.settings([0.01], [16])), [0, 1, 2])
    runs = runs[~((runs.secagg == "none") & (runs.compression == "topk") & (runs.seed == 2))]
    (line,) = field_bits.paired_gaps(runs)
    assert "(2 seeds" in line and line.split(": ")[1].startswith("-2.10 ± 0.10")


def test_summary_bits_add_a_masked_setting_per_width_except_its_own():
    labels = {label: overrides for label, overrides in field_bits.settings([0.01], [8, 16], [8])}
    assert labels["masked, quant_bits 16 (field 20 bits), summary 8 bits"] == [
        "secagg=dh", "compression.ratio=0.01", "secagg.quant_bits=16", "compression.sketch_quant_bits=8"]
    assert "masked, quant_bits 8 (field 12 bits), summary 8 bits" not in labels  # the same run as without it
    assert len(labels) == 5  # dense, per-client, two widths, one summary variant
