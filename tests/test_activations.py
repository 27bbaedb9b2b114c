"""results.save_model keeps a run's final weights, and experiments.activations reads them back as the run's model."""
import numpy as np
import pytest
import torch

import fl
from experiments import activations
from fl.config import as_dict, validate
from fl.results import MODEL_NAME, RunLog, config_hash, read_rows

SMALL = ["backend=inline", "model=mlp_small", "fl.rounds=2"]


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_a_saved_model_is_the_final_global_model_its_last_row_scored(tmp_path, secagg):
    rows = fl.run(fl.compose([*SMALL, f"secagg={secagg}", "results.save_model=true", f"results.dir={tmp_path}"]))
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    weights = np.load(run / MODEL_NAME, allow_pickle=False)
    assert weights.dtype == np.float32 and weights.shape == (int(rows["n_params"].iloc[0]),)
    table = activations.main([str(run)])  # refuses a model whose accuracy is not the last row's
    assert (table["accuracy"] == rows["accuracy"].iloc[-1]).all() and list(table["layer"]) == ["1 Linear"]
    assert 0 < table["positive"].iloc[0] < 1 and table["units_alive"].iloc[0] == "64/64"


def test_weights_that_do_not_score_the_last_row_are_refused_as_not_the_runs_model(tmp_path):
    fl.run(fl.compose([*SMALL, "secagg=none", "results.save_model=true", f"results.dir={tmp_path}"]))
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    np.save(run / MODEL_NAME, np.zeros_like(np.load(run / MODEL_NAME)))  # every image then goes to class 0
    with pytest.raises(SystemExit, match="is not the model of these rows"):
        activations.main([str(run)])


def test_a_run_without_save_model_keeps_no_model_and_asking_for_one_later_warns(tmp_path, capsys):
    fl.run(fl.compose([*SMALL, "secagg=none", f"results.dir={tmp_path}"]))
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (run / MODEL_NAME).exists()
    with pytest.raises(SystemExit, match="results.save_model=true"):
        activations.main([str(run)])
    with pytest.raises(SystemExit, match=rf"no run under {tmp_path} holds model.npy \(only a run made with "
                       r"results.save_model=true"):  # its folder of runs: none to describe (was a KeyError)
        activations.main([str(tmp_path)])
    fl.run(fl.compose([*SMALL, "secagg=none", "results.save_model=true", f"results.dir={tmp_path}"]))  # skipped
    assert "has no model.npy" in capsys.readouterr().err and not (run / MODEL_NAME).exists()


def test_a_folder_of_runs_is_read_run_by_run_and_runs_without_a_model_are_skipped(tmp_path, capsys):
    fl.run(fl.compose([*SMALL, "secagg=none", "results.save_model=true", f"results.dir={tmp_path}"]))
    fl.run(fl.compose([*SMALL, "secagg=none", "seed=1", f"results.dir={tmp_path}"]))
    (tmp_path / "sweeps").mkdir()  # what a Hydra sweep leaves beside its runs
    table = activations.main([str(tmp_path), "--max-test", "10"])
    assert table["run"].nunique() == 1 and "skipping" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="neither a run folder"):
        activations.main([str(tmp_path / "sweeps")])


def test_save_model_is_outside_the_config_hash():
    def chash(*overrides):
        return config_hash(as_dict(validate(fl.compose(["secagg=none", *overrides]))))

    assert chash() == chash("results.save_model=true")


def test_a_model_saved_by_a_run_killed_before_done_json_is_kept_aside_by_the_rerun(tmp_path):
    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    killed = RunLog(tmp_path, config_hash(cfg), "killed")
    killed.start(cfg)
    killed.write({"run_id": "killed", "round": 0})
    killed.save_model(np.arange(3, dtype=np.float32))
    killed.close()
    RunLog(tmp_path, config_hash(cfg), "rerun").start(cfg)
    assert not (killed.dir / MODEL_NAME).exists()
    kept = np.load(killed.dir / "model.incomplete-killed.npy", allow_pickle=False)
    assert kept.tolist() == [0, 1, 2] and len(read_rows(killed.dir / "rounds.incomplete-killed.csv")) == 1


def test_activity_sees_dead_features_and_input_blind_logits():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = np.random.default_rng(0).normal(size=(50, 4))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every unit below 0 for every input: the head sees zeros
    (layer,), logits = activations.activity(model, x)
    assert layer == {"layer": "0 Linear", "positive": 0.0, "units_alive": "0/3"}
    assert np.allclose(logits, model[2].bias.detach().numpy()) and (logits == logits[0]).all()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.copy_(torch.tensor([1.0, -1.0, 1.0]))
    (layer,), _ = activations.activity(model, x)
    assert layer["positive"] == pytest.approx(2 / 3) and layer["units_alive"] == "2/3"


def test_activity_in_batches_is_activity_over_all_images_at_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    x = np.random.default_rng(1).normal(size=(103, 4))
    whole, logits = activations.activity(model, x, batch=1000)
    parts, pieces = activations.activity(model, x, batch=10)  # 11 batches, the last of 3 images
    assert [r["layer"] for r in whole] == ["0 Linear", "2 Linear"] and np.allclose(logits, pieces, rtol=1e-6, atol=1e-7)
    for a, b in zip(whole, parts):
        assert a["units_alive"] == b["units_alive"] and a["positive"] == pytest.approx(b["positive"], rel=1e-12)


def test_activity_sees_every_relu_of_a_resnet_block_as_well_as_the_stems():
    from omegaconf import OmegaConf
    from fl.models import build_model

    torch.manual_seed(0)
    model = build_model(OmegaConf.create({"name": "resnet_small", "channels": [4, 8], "hidden": [], "norm": "group"}),
                        (1, 8, 8), 10)
    layers, logits = activations.activity(model, np.random.default_rng(0).normal(size=(20, 64)).astype(np.float32))
    # the stem's, then two per block (two stages of two blocks); the head has no hidden layer
    blocks = [f"{b}.norm{i} GroupNorm" for b in (4, 5, 6, 7) for i in (1, 2)]
    assert [r["layer"] for r in layers] == ["2 GroupNorm", *blocks] and logits.shape == (20, 10)


def test_activity_counts_a_convolution_unit_per_channel():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.ReLU())
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.copy_(torch.tensor([0.5, -0.5]))
    (layer,), out = activations.activity(model, np.ones((4, 1, 5, 5)))
    assert out.shape == (4, 2, 5, 5) and layer == {"layer": "0 Conv2d", "positive": 0.5, "units_alive": "1/2"}
