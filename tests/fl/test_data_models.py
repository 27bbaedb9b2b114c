"""Digits data, seeded partitions (IID, Dirichlet, shards, label quantity) and the MLP sizes."""
import hashlib

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fl.data import load_dataset, load_digits
from fl.partitions import partition, partition_summary
from fl.errors import ConfigError
from fl.models import build_model, flatten_parameters, get_flat, num_params, set_flat


def test_digits_split_is_seeded_stratified_and_standardized_with_train_statistics():
    a, b = load_digits(0), load_digits(0)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert len(a.y_train) + len(a.y_test) == 1797 and len(a.y_test) == 360
    assert abs(float(a.x_train.mean())) < 1e-5
    assert not np.array_equal(load_digits(1).y_test, a.y_test)
    assert set(np.unique(a.y_test)) == set(range(10))


def test_digits_default_is_unchanged_by_the_new_dataset_keys():
    cfg = OmegaConf.create({"name": "digits", "test_fraction": 0.2, "root": "nowhere", "download": False,
                            "max_train": None, "max_test": None})
    a, b = load_dataset(cfg, 0), load_digits(0)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert a.input_shape == (64,) and a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "labels"])
def test_partitions_are_disjoint_cover_everything_and_are_seeded(scheme):
    labels = load_digits(0).y_train
    parts = partition(labels, 20, scheme, 0.3, seed=5)
    joined = np.concatenate(parts)
    assert len(parts) == 20 and min(len(p) for p in parts) >= 2
    np.testing.assert_array_equal(np.sort(joined), np.arange(len(labels)))
    again = partition(labels, 20, scheme, 0.3, seed=5)
    assert all(np.array_equal(p, q) for p, q in zip(parts, again))
    other = partition(labels, 20, scheme, 0.3, seed=6)
    assert not all(np.array_equal(p, q) for p, q in zip(parts, other))


@pytest.mark.parametrize("per_client", [1, 2, 3])
def test_shards_give_each_client_exactly_its_number_of_single_class_shards(per_client):
    """10 classes of k * 10 samples cut into 10 clients x k shards of 10: every shard is one class, so a
    client's labels come in whole shards, k of them."""
    shard = 10
    labels = np.repeat(np.arange(10), per_client * shard)
    rng = np.random.default_rng(0)
    labels = labels[rng.permutation(len(labels))]  # the partition must sort by label itself
    parts = partition(labels, 10, "shards", 0.0, seed=1, shards_per_client=per_client)
    for p in parts:
        assert len(p) == per_client * shard
        counts = np.bincount(labels[p], minlength=10)
        assert np.all(counts % shard == 0) and 1 <= np.count_nonzero(counts) <= per_client


def test_shards_on_digits_hold_about_shards_per_client_classes():
    labels = load_digits(0).y_train
    for per_client in (1, 2, 4):
        parts = partition(labels, 20, "shards", 0.0, seed=3, shards_per_client=per_client)
        classes = [len(np.unique(labels[p])) for p in parts]
        n_shard = len(labels) // (20 * per_client)
        assert all(per_client * n_shard <= len(p) <= per_client * (n_shard + 1) for p in parts)
        assert max(classes) <= 2 * per_client and np.mean(classes) <= per_client + 1
        # shards go to clients at random: handed out in label order, a client's shards would mostly share a class
        assert np.mean(classes) >= 0.8 * per_client


@pytest.mark.parametrize("per_client", [1, 2, 3, 10])
def test_labels_give_each_client_exactly_its_number_of_classes_split_evenly_among_holders(per_client):
    """NIID-Bench's #C=k: client i holds class i mod 10 and k - 1 others, exactly k in all, and a class's samples
    are shared evenly (to one sample) by the clients that hold it."""
    labels = load_digits(0).y_train
    parts = partition(labels, 20, "labels", 0.0, seed=2, labels_per_client=per_client)
    held = [set(np.unique(labels[p]).tolist()) for p in parts]
    assert all(len(h) == per_client and i % 10 in h for i, h in enumerate(held))
    for c in range(10):
        shares = [int(np.sum(labels[p] == c)) for p, h in zip(parts, held) if c in h]
        assert sum(shares) == int(np.sum(labels == c)) and max(shares) - min(shares) <= 1
    if per_client == 2:  # the second class is drawn, not fixed
        assert len({frozenset(h) for h in held}) > 10


def test_labels_refuse_fewer_clients_than_classes_and_more_labels_than_classes():
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ValueError, match="one client per class"):
        partition(labels, 5, "labels", 0.0, 0)
    with pytest.raises(ValueError, match="labels_per_client"):
        partition(labels, 10, "labels", 0.0, 0, labels_per_client=11)
    with pytest.raises(ValueError, match="fewer than 2 samples"):
        partition(np.repeat(np.arange(10), 5), 25, "labels", 0.0, 0, labels_per_client=1)  # 5 split 2, 2, 1
    # a class with more holders than samples would leave some holders without it: refused, not a client short of
    # its classes
    with pytest.raises(ValueError, match="gives class .* to .* clients but it has 3 samples"):
        partition(np.repeat(np.arange(10), 3), 12, "labels", 0.0, 0, labels_per_client=5, min_size=1)


def test_shards_refuse_more_shards_than_samples():
    with pytest.raises(ValueError, match="shards"):
        partition(np.zeros(30, int), 10, "shards", 0.0, 0, shards_per_client=4)


def test_partition_summary_counts_samples_and_classes_per_client():
    labels = load_digits(0).y_train
    parts = partition(labels, 8, "shards", 0.0, seed=0)
    table = partition_summary(labels, parts)
    assert list(table.columns) == ["samples", "classes"] + [f"class_{c}" for c in range(10)]
    assert len(table) == 8 and table.index.name == "client"
    assert table["samples"].tolist() == [len(p) for p in parts]
    assert table["classes"].tolist() == [len(np.unique(labels[p])) for p in parts]
    assert int(table.filter(like="class_").to_numpy().sum()) == len(labels)


def test_dirichlet_with_small_alpha_skews_labels_more_than_iid():
    labels = load_digits(0).y_train

    def mean_classes(parts):
        return np.mean([len(np.unique(labels[p])) for p in parts])

    assert mean_classes(partition(labels, 10, "dirichlet", 0.1, 0)) \
        < mean_classes(partition(labels, 10, "iid", 0, 0)) - 3


def test_a_dirichlet_split_that_leaves_a_client_empty_names_both_ways_out():
    labels = load_digits(0).y_train
    with pytest.raises(ValueError, match=r"1437 samples for 300 clients\); raise dataset.alpha or dataset.max_train, "
                                         "or lower fl.num_clients"):
        partition(labels, 300, "dirichlet", 0.3, 62)
    with pytest.raises(ValueError, match=r"left a client with no samples in each of 1000 draws"):  # a run's min_size
        partition(labels, 1000, "dirichlet", 0.3, 62, min_size=1)


def _first_dirichlet_draw_holding(labels, num_clients, alpha, seed, min_size):
    """The recipe, plainly: per class a shuffle and Dir(alpha) shares; the first draw where no client is short."""
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        parts = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out


@pytest.mark.parametrize("min_size", [1, 3])
def test_a_dirichlet_split_is_the_first_draw_whose_every_client_holds_min_size_samples(min_size):
    """Draws are judged by their counts before any client's indices are built: the split kept must be the one the
    recipe keeps, seed for seed, or seeded runs (and committed results) change."""
    labels = np.repeat(np.arange(10), 6)
    for seed in range(20):
        got = partition(labels, 10, "dirichlet", 1.0, seed, min_size=min_size)
        want = _first_dirichlet_draw_holding(labels, 10, 1.0, seed, min_size)
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want)), seed


def test_a_refused_dirichlet_draw_builds_no_client_indices(monkeypatch):
    """Each of the 1000 draws is judged by its per-client counts; only a kept draw is cut into clients' index arrays
    (cutting every refused draw made a refusal at thousands of clients take minutes, in every worker)."""
    labels = np.repeat(np.arange(10), 30)
    splits = []
    real = np.split
    monkeypatch.setattr(np, "split", lambda *a, **k: splits.append(1) or real(*a, **k))
    with pytest.raises(ConfigError, match="no samples in each of 1000 draws"):
        partition(labels, 200, "dirichlet", 0.1, 0, min_size=1)
    assert splits == []
    monkeypatch.undo()
    digits = load_digits(0).y_train  # and the kept draw is the one the loop always kept: every seed's split stands
    for (n, alpha, seed), digest in {(50, 0.3, 3): "df8a80bcdd3bddc2", (200, 0.5, 1): "feba77c22e937b8b"}.items():
        parts = partition(digits, n, "dirichlet", alpha, seed, min_size=1)
        got = hashlib.sha256(b"".join(np.int64(len(p)).tobytes() + p.astype(np.int64).tobytes() for p in parts))
        assert got.hexdigest()[:16] == digest


def test_unknown_partition_is_refused():
    with pytest.raises(ValueError, match="partition"):
        partition(np.zeros(100, int), 4, "pathological", 1.0, 0)


@pytest.mark.parametrize("name,hidden,low,high", [("mlp_small", [64], 4000, 6000),
                                                   ("mlp_large", [1024, 420], 450_000, 550_000)])
def test_model_sizes(name, hidden, low, high):
    model = build_model(OmegaConf.create({"name": name, "hidden": hidden}), 64, 10)
    assert low <= num_params(model) <= high


@pytest.mark.parametrize("flat_views", [False, True])
def test_set_flat_copies_so_training_never_writes_into_the_source_vector(flat_views):
    model = build_model(OmegaConf.create({"name": "mlp_small", "hidden": [8]}), 4, 3)
    if flat_views:
        flatten_parameters(model)
    flat = np.arange(num_params(model), dtype=np.float32)
    set_flat(model, flat)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert flat[0] == 0.0
    got = get_flat(model)
    np.testing.assert_array_equal(got[8 * 4:], flat[8 * 4:])
    np.testing.assert_array_equal(got[:8 * 4], flat[:8 * 4] + 1)
    got[:] = -1  # get_flat is a copy too
    assert get_flat(model)[5] == 6.0
    with pytest.raises(ValueError, match="values, the model"):
        set_flat(model, flat[:-1])


def test_flattened_parameters_keep_values_and_train_exactly_as_separate_tensors():
    """Workers re-home the parameters in one buffer (one copy per set_flat/get_flat, not one per tensor):
    the same SGD steps must give bit-identical weights, through the optimizer's in-place updates."""
    from fl.training import train_local

    cfg = OmegaConf.create({"name": "mlp_small", "hidden": [16]})
    data = load_digits(0)
    x, y = torch.from_numpy(data.x_train[:64]), torch.from_numpy(data.y_train[:64])
    results = []
    for flat_views in (False, True):
        torch.manual_seed(3)
        model = build_model(cfg, 64, 10)
        before = get_flat(model)
        if flat_views:
            flatten_parameters(model)
            np.testing.assert_array_equal(get_flat(model), before)
            buffer = model._flat_parameters  # every parameter is a view into it, in order
            offsets = np.cumsum([0] + [p.numel() for p in model.parameters()])[:-1]
            assert [p.data_ptr() for p in model.parameters()] == [buffer.data_ptr() + 4 * int(o) for o in offsets]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_local(model, optimizer, x, y, 2, 16, 7, "cpu")
        results.append(get_flat(model))
        if flat_views:  # the optimizer wrote into the buffer itself
            np.testing.assert_array_equal(model._flat_parameters.numpy(), results[-1])
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.array_equal(results[0], before)


def test_moving_a_flattened_model_falls_back_to_per_tensor_copies():
    model = flatten_parameters(build_model(OmegaConf.create({"name": "mlp_small", "hidden": [8]}), 4, 3))
    for p in model.parameters():  # what .to(another device) does: new storage for every parameter
        p.data = p.data.clone()
    flat = np.arange(num_params(model), dtype=np.float32)
    set_flat(model, flat)
    np.testing.assert_array_equal(get_flat(model), flat)
    np.testing.assert_array_equal(next(model.parameters()).detach().numpy().ravel(), flat[:32])


def test_seed_torch_gives_the_stream_of_torch_manual_seed():
    """Workers seed each client with seed_torch (no lazy CUDA/XPU seeding); dropout-style randomness must
    be exactly what torch.manual_seed would give."""
    from fl.training import seed_torch

    torch.manual_seed(1234)
    expected = (torch.rand(7), torch.nn.functional.dropout(torch.ones(50), 0.5))
    torch.manual_seed(99)  # a different state in between
    seed_torch(1234)
    got = (torch.rand(7), torch.nn.functional.dropout(torch.ones(50), 0.5))
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


@pytest.mark.parametrize("seed,test_fraction", [(0, 0.2), (1, 0.2), (7, 0.2), (3, 0.35)])
def test_digits_are_read_and_split_exactly_as_sklearn_does(seed, test_fraction):
    """fl.data reads sklearn's digits file and splits it without importing sklearn (130 MB of the driver)."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    x, y = sk_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x.astype(np.float32), y.astype(np.int64), test_size=test_fraction,
                                              random_state=seed, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0
    ours = load_digits(seed, test_fraction)
    for got, expected in [(ours.x_train, (x_tr - mean) / std), (ours.x_test, (x_te - mean) / std),
                          (ours.y_train, y_tr), (ours.y_test, y_te)]:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("test_fraction", [0.9999, 0.999, 0.0001])
def test_a_digits_test_fraction_that_leaves_a_split_short_of_a_class_is_refused(test_fraction):
    """sklearn refuses these splits; an empty train split would otherwise fail in indexing, naming no setting."""
    with pytest.raises(ConfigError, match="dataset.test_fraction"):
        load_digits(0, test_fraction)


def test_a_ray_run_on_digits_leaves_torch_and_sklearn_out_of_the_driver(tmp_path):
    import subprocess
    import sys

    code = ("import sys, fl; fl.run(fl.compose(['model=mlp_small', 'secagg=dh', 'fl.rounds=1', 'backend=ray', "
            f"'results.dir={tmp_path}'])); print(sorted(m for m in ('torch', 'sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_dirichlet_draw_whose_smallest_client_has_exactly_min_size_is_kept():
    """A draw is redrawn only below min_size: redrawing at it too would change every seed's partition."""
    labels = np.repeat(np.arange(10), 20)
    parts = partition(labels, 20, "dirichlet", 0.5, 5, min_size=1)  # this seed's first draw has a client of 1
    assert min(len(p) for p in parts) == 1
