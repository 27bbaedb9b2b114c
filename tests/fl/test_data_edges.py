"""Dataset edges the loaders must hold: cache staleness, refused label values and shapes, the subsample draws."""
import os
import shutil

import numpy as np
import pytest
from fixtures_datasets import cifar_checksums, dataset_cfg, synthetic_images, write_cifar10, write_mnist

from fl.data import DatasetNotFoundError, load_dataset


def _flat_gz(tmp_path, name, x, y, n_train):
    """The four gzipped IDX files flat in `tmp_path/name`, as Debian installs them."""
    raw = write_mnist(tmp_path / f"staging-{name}", "FashionMNIST", x[:n_train], y[:n_train], x[n_train:],
                      y[n_train:], compress=True)
    flat = tmp_path / name
    shutil.copytree(raw, flat)
    return flat


def test_a_replaced_source_of_another_size_is_unpacked_again_even_with_the_very_same_time(tmp_path):
    """The cache stamp holds the source's size as well as its time: a replacement that keeps the time to the
    nanosecond (cp -p on a file system of coarse times, a restore) still differs in its size."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    flat = _flat_gz(tmp_path, "flat", x, y, 60)
    cfg = dataset_cfg("fashion_mnist", tmp_path / "none", system_dirs=[str(flat)], cache=str(tmp_path / "cache"))
    np.testing.assert_array_equal(load_dataset(cfg, 0).y_train, y[:60])
    other = _flat_gz(tmp_path, "other", x, y, 50)  # 50 training samples: both training files change size
    for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        before = os.stat(flat / f)
        (flat / f).write_bytes((other / f).read_bytes())
        assert os.path.getsize(flat / f) != before.st_size
        os.utime(flat / f, ns=(before.st_atime_ns, before.st_mtime_ns))
    np.testing.assert_array_equal(load_dataset(cfg, 0).y_train, y[:50])


def test_a_label_equal_to_the_number_of_classes_is_refused(tmp_path):
    """Labels run 0..9: a 10 is one past the last class (cross-entropy would fail mid-run, on one client only)."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    y_train = np.where(np.arange(60) == 7, 10, y[:60]).astype(np.uint8)
    write_mnist(tmp_path, "MNIST", x[:60], y_train, x[60:], y[60:])
    with pytest.raises(DatasetNotFoundError,
                       match="train files under .* disagree: labels from 0 to 10, expected 0 to 9"):
        load_dataset(dataset_cfg("mnist", tmp_path), 0)


def test_a_negative_cifar_label_is_refused(tmp_path, monkeypatch):
    """CIFAR-10's labels are pickled Python ints, so unlike MNIST's uint8 they can be negative."""
    import torchvision.datasets

    x, y = synthetic_images(40, (3, 32, 32), seed=4)
    y_test = np.where(np.arange(10) == 2, -1, y[30:].astype(np.int64))
    md5 = write_cifar10(tmp_path, x[:30], y[:30], x[30:], y_test)
    for attr, value in cifar_checksums(md5).items():
        monkeypatch.setattr(torchvision.datasets.CIFAR10, attr, value)
    with pytest.raises(DatasetNotFoundError,
                       match="test files under .* disagree: labels from -1 to \\d, expected 0 to 9"):
        load_dataset(dataset_cfg("cifar10", tmp_path), 0)


def test_a_cifar_split_of_no_samples_is_refused(tmp_path, monkeypatch):
    """A CIFAR-10 batch file may hold no images and pass its checksum: the run would then train, and divide by a test
    split of none at its first evaluation."""
    import torchvision.datasets

    x, y = synthetic_images(30, (3, 32, 32), seed=4)
    md5 = write_cifar10(tmp_path, x, y, x[:0], y[:0].astype(np.int64))
    for attr, value in cifar_checksums(md5).items():
        monkeypatch.setattr(torchvision.datasets.CIFAR10, attr, value)
    with pytest.raises(DatasetNotFoundError, match="test files under .* disagree: no samples"):
        load_dataset(dataset_cfg("cifar10", tmp_path), 0)


def test_images_of_another_size_are_refused_naming_both_shapes(tmp_path):
    """14x14 IDX images parse (their header agrees with their size), but no model here is built for them."""
    x, y = synthetic_images(80, (14, 14), seed=5)
    write_mnist(tmp_path, "MNIST", x[:60], y[:60], x[60:], y[60:])
    with pytest.raises(DatasetNotFoundError, match=r"disagree: images of shape \(1, 14, 14\), expected \(1, 28, 28\)"):
        load_dataset(dataset_cfg("mnist", tmp_path), 0)


def _indexed_mnist(root, n_train, n_test):
    """MNIST files whose image i carries i in its first pixel beside two constant pixels (0 and 100), so the index of
    every kept row can be read back through the affine per-channel standardization."""
    def images(n):
        x = np.zeros((n, 28, 28), np.uint8)
        x[:, 0, 0] = np.arange(n)
        x[:, 0, 2] = 100
        return x

    y = np.arange(max(n_train, n_test)) % 10
    write_mnist(root, "MNIST", images(n_train), y[:n_train], images(n_test), y[:n_test])


def _kept(x):
    zero, hundred = x[:, 0, 0, 1], x[:, 0, 0, 2]
    return np.rint((x[:, 0, 0, 0] - zero) * 100 / (hundred - zero)).astype(int)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_the_subsamples_are_the_pinned_draws_one_stream_per_split(tmp_path, seed):
    """Committed results depend on which samples max_train and max_test keep, so the draw is pinned: the train
    split's from numpy's default_rng([seed, 1]), the test split's from default_rng([seed, 2]), indices sorted.
    Equal splits and limits must keep different samples (one stream per split), and seed 1's train draw must not
    be seed 0's test draw (a seed + salt key would make it so)."""
    _indexed_mnist(tmp_path, 40, 40)
    data = load_dataset(dataset_cfg("mnist", tmp_path, max_train=12, max_test=12), seed)
    for split, salt in ((data.x_train, 1), (data.x_test, 2)):
        want = np.sort(np.random.default_rng([seed, salt]).choice(40, size=12, replace=False))
        np.testing.assert_array_equal(_kept(split), want)
    assert not np.array_equal(_kept(data.x_train), _kept(data.x_test))


def test_digits_max_test_alone_subsamples_the_test_split_and_keeps_the_training_split():
    """max_test without max_train: the test split is cut, the training split is the one load_digits gives."""
    from fl.data import load_digits

    full = load_digits(0)
    data = load_dataset(dataset_cfg("digits", "nowhere", max_test=50), 0)
    assert len(data.y_test) == 50
    np.testing.assert_array_equal(data.y_train, full.y_train)


def test_a_dirichlet_split_kept_only_after_a_hundred_draws_is_found():
    """The search runs 1000 draws, as its refusal says: 30 clients on 100 samples at alpha 0.1, seed 1, is first
    held (every client at least one sample) at draw 136 of the recipe in test_data_models."""
    from fl.partitions import partition

    labels = np.repeat(np.arange(10), 10)
    parts = partition(labels, 30, "dirichlet", 0.1, 1, min_size=1)
    assert len(parts) == 30 and min(len(p) for p in parts) >= 1


def test_shards_of_one_sample_each_are_allowed():
    """num_clients * shards_per_client may equal the number of samples: every shard is then one sample."""
    from fl.partitions import partition

    labels = np.repeat(np.arange(10), 2)
    parts = partition(labels, 10, "shards", 0.0, 0, shards_per_client=2)
    assert sorted(np.concatenate(parts).tolist()) == list(range(20)) and all(len(p) == 2 for p in parts)


def test_labels_refuse_one_client_short_of_one_per_class():
    """Nine clients for ten classes: a class would go unheld (or to no one at all)."""
    from fl.data import ConfigError
    from fl.partitions import partition

    with pytest.raises(ConfigError, match="at least one client per class .10.; got 9 clients"):
        partition(np.repeat(np.arange(10), 20), 9, "labels", 0.0, 0)


def test_a_runs_partitions_are_partition_with_its_config_and_min_size_one():
    """Driver and workers rebuild the split from the config alone: partition() with the run's seed, its partition's
    own parameters, and min_size=1 (a run refuses only an empty client), whatever else the config holds."""
    from omegaconf import OmegaConf

    from fl.partitions import client_partitions, partition

    labels = np.repeat(np.arange(10), 4)
    cfg = OmegaConf.create({"seed": 7, "fl": {"num_clients": 40},
                            "dataset": {"partition": "iid", "alpha": 0.5, "shards_per_client": 1,
                                        "labels_per_client": 3}})
    parts = client_partitions(cfg, labels)  # 40 clients of one sample each: min_size=2 would refuse it
    assert all(len(p) == 1 for p in parts)
    want = partition(labels, 40, "iid", 0.5, 7, min_size=1)
    assert all(np.array_equal(p, q) for p, q in zip(parts, want))
    cfg.fl.num_clients, cfg.dataset.partition = 10, "labels"
    parts = client_partitions(cfg, labels)
    assert all(len(np.unique(labels[p])) == 3 for p in parts)  # labels_per_client, not shards_per_client
    want = partition(labels, 10, "labels", 0.5, 7, min_size=1, labels_per_client=3)
    assert all(np.array_equal(p, q) for p, q in zip(parts, want))


@pytest.mark.parametrize("scheme,num_clients,seed,extra,digest", [
    ("iid", 50, 3, {}, "791885433bd616ac"),
    ("shards", 40, 1, {"shards_per_client": 3}, "45b5819d87151418"),
    ("labels", 30, 2, {"labels_per_client": 3}, "85aba45c68621ba1"),
])
def test_the_other_partitions_are_pinned_seed_for_seed(scheme, num_clients, seed, extra, digest):
    """Committed results depend on every client's indices: these digests were taken from the code that produced
    them (as test_data_models pins the Dirichlet split), so any change to a split's draws or cuts shows here."""
    import hashlib

    from fl.data import load_digits
    from fl.partitions import partition

    parts = partition(load_digits(0).y_train, num_clients, scheme, 0.5, seed, min_size=1, **extra)
    got = hashlib.sha256(b"".join(np.int64(len(p)).tobytes() + p.astype(np.int64).tobytes() for p in parts))
    assert got.hexdigest()[:16] == digest


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "labels"])
def test_more_clients_than_min_size_lets_each_have_are_refused_by_every_scheme(scheme):
    """partition's default min_size is 2 (a caller of the API): 7 clients of 12 samples would leave some with one."""
    from fl.errors import ConfigError
    from fl.partitions import partition

    labels = np.arange(12) % 10
    with pytest.raises(ConfigError, match="fl.num_clients=7: 7 clients cannot each get 2 of 12 training samples"):
        partition(labels, 7, scheme, 0.5, 0)
    if scheme in ("iid", "shards"):  # labels needs a client per class, Dirichlet draws sizes that rarely fit here
        assert min(map(len, partition(labels, 6, scheme, 0.5, 0, shards_per_client=1))) >= 2
