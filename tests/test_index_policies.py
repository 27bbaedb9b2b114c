"""experiments.index_policies' settings: every line of a partition runs on that partition, its dense baseline
included, and runs the policy its label names; the options given replace the preset's."""
import math
from pathlib import Path

from experiments import index_policies


def test_every_setting_of_a_partition_runs_on_it_dense_baseline_included():
    settings = list(index_policies.settings([0.01], ["+experiment=fmnist_table"], ["iid", "shards"]))
    for label, overrides in settings:
        partition = label.split(":")[0]
        assert f"dataset.partition={partition}" in overrides and overrides[0] == "+experiment=fmnist_table", label
    dense = [overrides for label, overrides in settings if label.endswith(index_policies.DENSE)]
    assert len(dense) == 2 and "compression=none" in dense[1] and "dataset.partition=shards" in dense[1]


def _recorded_policy(overrides):
    """The index_policy a run of these overrides records (its plan, on a small model's shapes)."""
    import fl
    from fl.config import validate
    from fl.plan import Plan

    shapes = [(64, 64), (64,), (10, 64), (10,)]
    return Plan.build(validate(fl.compose(overrides)), [math.prod(s) for s in shapes], shapes).index_policy_name


def test_each_line_runs_the_policy_its_label_names():
    recorded = {label: _recorded_policy(overrides) for label, overrides in index_policies.settings([0.01])}
    assert recorded == {index_policies.DENSE: "dense", "per-client top-k (no masking)": "per-client",
                        "masked, fresh (marginals)": "fresh(marginals)",
                        "masked, fresh, blocks of 64": "fresh(blocks of 64)",
                        "masked, fresh, count-sketch summary": "fresh",  # a count sketch: the policy's own name
                        "masked, fresh, exact summary (the bound: top k of the sum, a dense first exchange)":
                            "fresh(exact)",
                        "masked, sketch (stale)": "sketch", "masked, randk": "randk", "masked, prev_topk": "prev_topk",
                        "masked rotation, 8 bits": "rotation-codec (dense)"}


def test_the_options_given_replace_the_presets_and_the_table_goes_to_out(tmp_path, monkeypatch):
    """--runs-dir, --ratios, --seeds and --out over the preset's: the fmnist preset's runs folder and table are
    committed results."""
    import pandas as pd

    asked = []

    def run_grid(settings, seeds, backend, runs_dir):
        settings = list(settings)
        named = {o for _, overrides in settings for o in overrides}
        asked.append((seeds, backend, runs_dir, sorted(o for o in named if o.startswith(("compression.ratio=",
                                                                                          "dataset.partition=")))))
        return pd.DataFrame([{"setting": label, "seed": seed, "partition": label.split(":")[0], "host": "cpu",
                              "compression": "none" if "compression=none" in overrides else "topk",
                              "ratio": 1.0 if "compression=none" in overrides else 0.1,
                              "secagg": "dh" if "secagg=dh" in overrides else "none", "policy_ran": label,
                              "accuracy": 0.8, "bytes_up": 1e6, "bytes_down": 1e6, "s_per_round": 0.1}
                             for label, overrides in settings for seed in seeds])

    monkeypatch.setattr(index_policies, "run_grid", run_grid)
    index_policies.main(["--preset", "fmnist", "--ratios", "0.1", "--seeds", "3", "--runs-dir", str(tmp_path / "runs"),
                         "--out", str(tmp_path / "t")])
    assert asked == [([3], "inline", str(tmp_path / "runs"),
                      ["compression.ratio=0.1", "dataset.partition=iid", "dataset.partition=shards"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.md"]
    md = (tmp_path / "t.md").read_text()
    assert "Regenerate: `python -m experiments.index_policies --preset fmnist --ratios 0.1 --seeds 3" in md
    assert "over seeds 3;" in md and "Fashion-MNIST" in md


def test_the_fmnist_preset_pools_the_runs_and_seeds_of_the_fmnist_table():
    """Its lines beside the committed fmnist table's: the same runs folder and seeds, so a cell either ran is
    reused and the two tables average the same runs."""
    from omegaconf import OmegaConf

    table = OmegaConf.load(Path(index_policies.__file__).parents[1] / "conf/experiment/fmnist_table.yaml")
    preset = index_policies.PRESETS["fmnist"]
    assert preset["seeds"] == [int(s) for s in str(table.hydra.sweeper.params.seed).split(",")]
    assert preset["runs_dir"] == table.results.dir
