"""Every model on every dataset; no running state outside the flat vector; devices; data already on the device."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures_datasets import dataset_cfg
from omegaconf import OmegaConf

import fl
from fl.config import DATASETS, MODELS, ConfigError, validate
from fl.data import INPUT_SHAPES, load_dataset, load_digits
from fl.partitions import partition
from fl.models import MODELS as BUILDABLE
from fl.models import (BasicBlock, MaxPool2x2, build_model, check_device, get_flat, image_shape, norm_layer,
                       num_params, param_table, set_flat)
from fl.training import evaluate, train_local

CUDA = torch.cuda.is_available()
REPO = Path(__file__).resolve().parents[2]


def model_cfg(name: str, **override):
    cfg = OmegaConf.load(REPO / "conf" / "model" / f"{name}.yaml")
    cfg.update(override)
    return cfg


def test_config_names_every_model_and_dataset_that_exists():
    assert set(MODELS) == set(BUILDABLE) and set(DATASETS) == set(INPUT_SHAPES)


@pytest.mark.parametrize("dataset", ["digits", "mnist", "fashion_mnist", "cifar10"])
@pytest.mark.parametrize("name", list(BUILDABLE))
def test_every_model_trains_a_step_and_evaluates_on_every_dataset(tiny, dataset, name):
    data = load_dataset(dataset_cfg(dataset, tiny, max_train=16, max_test=8), seed=0)
    torch.manual_seed(0)
    model = build_model(model_cfg(name), data.input_shape, data.num_classes)
    before = get_flat(model)
    assert len(before) == num_params(model) == sum(p.numel() for p in model.parameters())
    assert list(model.buffers()) == []  # the flat vector is the whole model state
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    assert train_local(model, optimizer, data.x_train, data.y_train, 1, 16, seed=0) == 1  # one step of 16
    accuracy, loss = evaluate(model, data.x_test, data.y_test)
    assert 0 <= accuracy <= 1 and np.isfinite(loss)
    assert not np.array_equal(get_flat(model), before)


def test_parameter_counts_span_ten_thousand_to_eleven_million():
    table = dict(param_table())
    print("\nmodel x dataset -> parameters")
    for name, counts in table.items():
        print(f"{name:14s}" + "".join(f"{counts[d]:>14,}" for d in INPUT_SHAPES))
    assert table["mlp_small"]["digits"] == 4_810 and table["mlp_large"]["digits"] == 501_270  # unchanged
    assert table["cnn_wide"]["mnist"] == 1_663_370  # the FedAvg paper's CNN
    assert 10.5e6 < table["resnet_small"]["cifar10"] < 11.5e6  # ResNet-18 size
    assert 10_000 < table["lenet"]["digits"] < 30_000
    sizes = [n for counts in table.values() for n in counts.values()]
    assert min(sizes) < 10_000 and max(sizes) > 10_000_000


def test_the_older_call_with_a_flat_feature_count_still_builds_every_model():
    for name in BUILDABLE:
        old = build_model(model_cfg(name), 64, 10)
        new = build_model(model_cfg(name), (64,), 10)
        assert num_params(old) == num_params(new)
    as_image = build_model(model_cfg("lenet"), (1, 28, 28), 10)
    assert num_params(build_model(model_cfg("lenet"), 784, 10)) == num_params(as_image)
    with pytest.raises(ValueError, match="input shape"):
        build_model(model_cfg("lenet"), 3072, 10)  # not square: pass (3, 32, 32)


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_evaluation_does_not_depend_on_which_clients_a_worker_trained_before(norm):
    """No running statistics: after loading the global weights, a model that trained other clients first
    evaluates exactly like a fresh one."""
    data = load_digits(0)
    parts = partition(data.y_train, 4, "shards", 0.0, 0, shards_per_client=1)  # skewed clients
    cfg = model_cfg("resnet_small", channels=[8, 16], norm=norm)
    torch.manual_seed(0)
    used, fresh = build_model(cfg, data.input_shape, 10), build_model(cfg, data.input_shape, 10)
    weights = get_flat(fresh)
    optimizer = torch.optim.SGD(used.parameters(), lr=0.1)
    for cid in (0, 1):
        set_flat(used, weights)
        train_local(used, optimizer, data.x_train[parts[cid]], data.y_train[parts[cid]], 1, 32, seed=cid)
    set_flat(used, weights)
    set_flat(fresh, weights)
    assert evaluate(used, data.x_test, data.y_test) == evaluate(fresh, data.x_test, data.y_test)
    assert set(used.state_dict()) == {name for name, _ in used.named_parameters()}


def test_resnet_normalizes_per_sample_with_group_norm_by_default_and_batch_norm_keeps_no_running_stats():
    data = load_digits(0)
    default = build_model(model_cfg("resnet_small", channels=[8, 16]), data.input_shape, 10)
    assert any(isinstance(m, torch.nn.GroupNorm) for m in default.modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in default.modules())
    x = torch.from_numpy(data.x_test[:64])  # per sample: a sample's logits do not depend on its batch
    default.eval()
    with torch.no_grad():
        whole = default(x)
        alone = torch.cat([default(x[i:i + 1]) for i in range(len(x))])
    np.testing.assert_allclose(alone.numpy(), whole.numpy(), rtol=1e-4, atol=1e-5)
    batch = build_model(model_cfg("resnet_small", channels=[8, 16], norm="batch"), data.input_shape, 10)
    norms = [m for m in batch.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(not m.track_running_stats and m.running_mean is None for m in norms)


def test_batch_norm_survives_a_one_sample_batch_at_one_by_one_resolution():
    """On 8x8 digits ResNet's last stage is 1x1: a trailing batch of one sample must train, not raise."""
    data = load_digits(0)
    model = build_model(model_cfg("resnet_small", channels=[8, 8, 8, 8], norm="batch"), data.input_shape, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_local(model, optimizer, data.x_train[:33], data.y_train[:33], 1, 32, seed=0)  # 32 + 1
    assert np.isfinite(get_flat(model)).all()


def test_training_on_tensors_already_on_the_device_matches_numpy_input():
    data = load_digits(0)
    x, y = data.x_train[:100], data.y_train[:100]
    results = []
    for xs, ys in [(x, y), (torch.from_numpy(x), torch.from_numpy(y))]:
        torch.manual_seed(0)
        model = build_model(model_cfg("lenet"), data.input_shape, 10)
        train_local(model, torch.optim.SGD(model.parameters(), lr=0.1), xs, ys, 2, 32, seed=1)
        results.append((get_flat(model), evaluate(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[1][1] == evaluate(model, data.x_test, data.y_test)


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_missing_is_a_clear_error_at_config_time():
    check_device("cpu")
    with pytest.raises(ValueError, match="device=cuda requested but CUDA is not available on this machine"):
        check_device("cuda")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        validate(fl.compose(["device=cuda"]))


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        check_device("tpu")


def test_cuda_with_ray_needs_gpus_reserved_for_the_workers(monkeypatch):
    """Ray hides GPUs from actors that reserve none, so device=cuda with num_gpus_per_worker=0 is refused."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="num_gpus_per_worker"):
        validate(fl.compose(["device=cuda", "backend=ray"]))
    validate(fl.compose(["device=cuda", "backend=ray", "ray.num_gpus_per_worker=0.5"]))
    validate(fl.compose(["device=cuda", "backend=inline"]))


@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the benchmark would run")
def test_gpu_round_says_why_it_cannot_run_without_cuda():
    proc = subprocess.run([sys.executable, "-m", "experiments.gpu_round"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 1 and "CUDA is not available" in proc.stderr and "Traceback" not in proc.stderr


def test_gpu_round_times_a_round_of_local_training():
    from experiments.gpu_round import synthetic, time_round

    data = synthetic("cifar10", 40)
    seconds, n = time_round("lenet", data, partition(data.y_train, 4, "iid", 0.0, 0), "cpu", batch_size=10)
    assert seconds > 0 and n == 136_886


def test_valid_padding_is_the_classic_lenet_with_256_features_into_the_head():
    """28 -> 24 -> 12 -> 8 -> 4 with 16 channels (NIID-Bench's CNN); 'same' keeps 28 -> 14 -> 7."""
    valid = build_model(model_cfg("lenet", padding="valid"), (1, 28, 28), 10)
    same = build_model(model_cfg("lenet"), (1, 28, 28), 10)
    first = [next(m for m in model.modules() if isinstance(m, torch.nn.Linear)) for model in (valid, same)]
    assert [f.in_features for f in first] == [16 * 4 * 4, 16 * 7 * 7]


def test_group_norm_takes_32_groups_or_the_most_that_divide_the_channels():
    assert [norm_layer("group", c).num_groups for c in (8, 48, 64, 512)] == [8, 16, 32, 32]


def test_a_block_that_widens_at_stride_1_projects_its_input():
    block = BasicBlock(4, 8, 1, "group")
    assert block(torch.zeros(2, 4, 6, 6)).shape == (2, 8, 6, 6)


def test_the_fast_max_pool_without_autograd_equals_max_pool2d_on_odd_sizes_and_negative_values():
    for h, w in ((5, 7), (5, 6), (4, 7)):
        x = -torch.rand(2, 3, h, w) - 1  # every value negative: a padded 0 would win the last row's or column's pools
        with torch.no_grad():
            fast = MaxPool2x2()(x)
        np.testing.assert_array_equal(fast.numpy(), torch.nn.functional.max_pool2d(x, 2, ceil_mode=True).numpy())


def test_a_resnet_config_without_a_norm_uses_group_norm_and_a_two_dimensional_input_is_one_channel():
    cfg = OmegaConf.create({"name": "resnet_small", "channels": [8, 16]})  # no `norm` key: an older config
    model = build_model(cfg, (8, 8), 10)
    assert any(isinstance(m, torch.nn.GroupNorm) for m in model.modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert image_shape((28, 28)) == (1, 28, 28) and image_shape(64) == (1, 8, 8)
