"""Digits data, seeded partitions and the two model sizes."""
import numpy as np
import pytest
import torch

from fl.data import load_digits, partition
from fl.models import build_model, get_flat, num_params, set_flat
from omegaconf import OmegaConf


def test_digits_split_is_seeded_stratified_and_standardized_with_train_statistics():
    a, b = load_digits(0), load_digits(0)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert len(a.y_train) + len(a.y_test) == 1797 and len(a.y_test) == 360
    assert abs(float(a.x_train.mean())) < 1e-5
    assert not np.array_equal(load_digits(1).y_test, a.y_test)
    assert set(np.unique(a.y_test)) == set(range(10))


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_partitions_are_disjoint_cover_everything_and_are_seeded(scheme):
    labels = load_digits(0).y_train
    parts = partition(labels, 20, scheme, 0.3, seed=5)
    joined = np.concatenate(parts)
    assert len(parts) == 20 and min(len(p) for p in parts) >= 2
    np.testing.assert_array_equal(np.sort(joined), np.arange(len(labels)))
    again = partition(labels, 20, scheme, 0.3, seed=5)
    assert all(np.array_equal(p, q) for p, q in zip(parts, again))


def test_dirichlet_with_small_alpha_skews_labels_more_than_iid():
    labels = load_digits(0).y_train

    def mean_classes(parts):
        return np.mean([len(np.unique(labels[p])) for p in parts])

    assert mean_classes(partition(labels, 10, "dirichlet", 0.1, 0)) < mean_classes(partition(labels, 10, "iid", 0, 0)) - 3


def test_unknown_partition_is_refused():
    with pytest.raises(ValueError, match="partition"):
        partition(np.zeros(100, int), 4, "shards", 1.0, 0)


@pytest.mark.parametrize("name,hidden,low,high", [("mlp_small", [64], 4000, 6000),
                                                   ("mlp_large", [1024, 420], 450_000, 550_000)])
def test_model_sizes(name, hidden, low, high):
    model = build_model(OmegaConf.create({"name": name, "hidden": hidden}), 64, 10)
    assert low <= num_params(model) <= high


def test_set_flat_copies_so_training_never_writes_into_the_source_vector():
    model = build_model(OmegaConf.create({"name": "mlp_small", "hidden": [8]}), 4, 3)
    flat = np.arange(num_params(model), dtype=np.float32)
    set_flat(model, flat)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert flat[0] == 0.0
    np.testing.assert_array_equal(get_flat(model)[8 * 4:], flat[8 * 4:])
