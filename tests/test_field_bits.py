"""experiments.field_bits' table and its seed-by-seed gaps, from synthetic runs (no training)."""
import pandas as pd

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
                        "bytes_up": 1e6, "bytes_down": 1e6, "s_per_round": 0.1, "partition": "iid", "host": "cpu"})
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
    runs = runs[runs.seed != 1]  # one seed left: no spread to state, never "± nan"
    (line,) = field_bits.paired_gaps(runs)
    assert line == "- ratio 0.01, masked, quant_bits 16 (field 20 bits): -2.00 points against per-client top-k (1 seed)"


def test_summary_bits_add_a_masked_setting_per_width_except_its_own():
    labels = {label: overrides for label, overrides in field_bits.settings([0.01], [8, 16], [8])}
    assert labels["masked, quant_bits 16 (field 20 bits), summary 8 bits"] == [
        "secagg=dh", "compression.ratio=0.01", "secagg.quant_bits=16", "compression.sketch_quant_bits=8"]
    assert "masked, quant_bits 8 (field 12 bits), summary 8 bits" not in labels  # the same run as without it
    assert len(labels) == 5  # dense, per-client, two widths, one summary variant


def test_against_compares_every_masked_ratio_with_per_client_top_k_at_one_ratio():
    """Masked top-k at 0.02 against per-client top-k at 0.01 (the bytes masking spends to match it), not at 0.02."""
    rows = []
    for seed in range(3):
        for ratio, secagg, accuracy in ((0.01, "none", 0.960), (0.02, "none", 0.970), (0.02, "dh", 0.955)):
            rows.append({"setting": "per-client" if secagg == "none" else "masked", "seed": seed, "compression": "topk",
                         "ratio": ratio, "secagg": secagg,
                         "accuracy": accuracy + 0.01 * seed + 0.001 * seed * (secagg == "dh")})
    runs = pd.DataFrame(rows)
    (own,) = field_bits.paired_gaps(runs)
    (line,) = field_bits.paired_gaps(runs, against=0.01)
    assert own.startswith("- ratio 0.02, masked: -1.40 ± 0.06 points against per-client top-k (3 seeds")
    assert line.startswith("- ratio 0.02, masked: -0.40 ± 0.06 points against per-client top-k at ratio 0.01 (3 seeds")


def test_against_runs_the_reference_per_client_setting_without_its_masked_twin(tmp_path, monkeypatch):
    """The masked settings at --against were run (widths x seeds runs) and then dropped from the table."""
    ran = []

    def runs_of(settings, seeds, *_):
        settings = list(settings)
        ran.extend((label, next(o for o in [*overrides, None] if o is None or o.startswith("compression.ratio=")))
                   for label, overrides in settings)
        out = []
        for label, overrides in settings:
            ratio = next((float(o.split("=")[1]) for o in overrides if o.startswith("compression.ratio=")), 1.0)
            kind = "dense" if "compression=none" in overrides else "masked" if "secagg=dh" in overrides else "pc"
            for seed in seeds:
                out.append({"setting": label, "seed": seed, "compression": "none" if kind == "dense" else "topk",
                            "ratio": ratio, "secagg": "dh" if kind == "masked" else "none", "policy_ran": kind,
                            "accuracy": 0.9 + 0.01 * seed, "bytes_up": 1e6, "bytes_down": 1e6, "s_per_round": 0.1,
                            "partition": "iid", "host": "cpu"})
        return pd.DataFrame(out)

    monkeypatch.setattr(field_bits, "run_grid", runs_of)
    table = field_bits.main(["--ratios", "0.02", "--widths", "16", "--against", "0.01", "--seeds", "0", "1",
                             "--out", str(tmp_path / "b")])
    assert set(zip(table.ratio, table.secagg)) == {(1.0, "none"), (0.01, "none"), (0.02, "none"), (0.02, "dh")}
    assert ran == [(field_bits.DENSE, None), ("per-client top-k (no masking)", "compression.ratio=0.01"),
                   ("per-client top-k (no masking)", "compression.ratio=0.02"),
                   ("masked, quant_bits 16 (field 20 bits)", "compression.ratio=0.02")]
    md = (tmp_path / "b.md").read_text()
    assert "- ratio 0.02, masked, quant_bits 16 (field 20 bits): +0.00 ± 0.00 points against per-client top-k at " \
           "ratio 0.01 (2 seeds" in md and "--against 0.01" in md


def test_each_masked_line_runs_at_the_quant_bits_its_label_names():
    labels = dict(field_bits.settings([0.01], [8, 16]))
    assert labels["masked, quant_bits 8 (field 12 bits)"] == ["secagg=dh", "compression.ratio=0.01",
                                                              "secagg.quant_bits=8"]
    assert labels["masked, quant_bits 16 (field 20 bits)"][-1] == "secagg.quant_bits=16"


def test_each_masked_line_names_the_field_its_runs_mask_in():
    """The labels' field (quant_bits + 4) is the config's for the digits setting's 10 clients a round."""
    import math

    import fl
    from fl.config import validate
    from fl.plan import Plan

    shapes = [(64, 64), (64,), (10, 64), (10,)]
    for label, overrides in field_bits.settings([0.01], [8, 12, 16, 24], [8]):
        if "secagg=dh" in overrides:
            plan = Plan.build(validate(fl.compose(overrides)), [math.prod(s) for s in shapes], shapes)
            assert f"(field {plan.masked_field_bits} bits)" in label, label
