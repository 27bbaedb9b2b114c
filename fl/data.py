"""Datasets and client partitions, all seeded so every worker rebuilds the same split on its own.

Datasets: `digits` (scikit-learn's bundled 8x8 digits, the offline default) and `mnist`,
`fashion_mnist`, `cifar10` read by torchvision's own dataset classes from files the user placed under
`dataset.root` (downloaded there only with `dataset.download=true`). Images come out as float32
(n, C, H, W) standardized per channel with train statistics; digits as (n, 64). Labels are int64.
"""
from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass

import numpy as np

from fl.config import ConfigError

DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10")
PARTITIONS = ("iid", "dirichlet", "shards")
INPUT_SHAPES = {"digits": (64,), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "cifar10": (3, 32, 32)}


@dataclass
class Dataset:
    x_train: np.ndarray  # float32, (n, features) or (n, C, H, W)
    y_train: np.ndarray  # int64
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def num_features(self) -> int:
        return int(np.prod(self.x_train.shape[1:]))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample: (64,) for digits, (1, 28, 28) for MNIST, (3, 32, 32) for CIFAR-10."""
        return tuple(int(d) for d in self.x_train.shape[1:])


class DatasetNotFoundError(ConfigError, FileNotFoundError):
    """The dataset's files are not where torchvision reads them (or could not be read or downloaded).

    A ConfigError, so `simulate.py` reports it in one line, and a FileNotFoundError for everyone else.
    """


@dataclass(frozen=True)
class _Source:
    cls: str            # torchvision.datasets class name
    folder: str         # where that class reads, relative to dataset.root
    files: tuple        # file names it needs in that folder
    gzipped: bool       # whether the files may be placed as `<name>.gz`
    get: str            # where a user gets the files by hand


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
SOURCES = {
    "mnist": _Source("MNIST", os.path.join("MNIST", "raw"), _MNIST_FILES, True,
                     "the four MNIST IDX files (e.g. from https://ossci-datasets.s3.amazonaws.com/mnist/)"),
    "fashion_mnist": _Source("FashionMNIST", os.path.join("FashionMNIST", "raw"), _MNIST_FILES, True,
                             "the four Fashion-MNIST IDX files (https://github.com/zalandoresearch/fashion-mnist)"),
    "cifar10": _Source("CIFAR10", "cifar-10-batches-py",
                       tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"), False,
                       "the files of cifar-10-python.tar.gz (https://www.cs.toronto.edu/~kriz/cifar.html; "
                       "extracting it in dataset.root creates this folder)"),
}


def _opt(cfg, key: str, default):
    """A config value that older or hand-built configs may lack."""
    value = getattr(cfg, key, default)
    return default if value is None and default is not None else value


def load_digits(seed: int, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's bundled 8x8 digits: stratified seeded split, standardized with train statistics."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    x, y = sk_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x.astype(np.float32), y.astype(np.int64), test_size=test_fraction, random_state=seed, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0  # constant border pixels
    return Dataset((x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te, 10)


def expected_files(name: str, root: str) -> list[str]:
    """Full paths of the files torchvision reads for dataset `name` under `root`."""
    src = SOURCES[name]
    return [os.path.join(os.path.abspath(root), src.folder, f) for f in src.files]


def check_files(name: str, root: str) -> None:
    """Raise DatasetNotFoundError, naming every missing file and how to get it, unless all are in place.

    MNIST-style files may be placed gzipped (`<name>.gz`, as distributed); they are unpacked next to
    themselves, which is what torchvision's own download does.
    """
    if name not in SOURCES:
        return
    src = SOURCES[name]
    missing = []
    for path in expected_files(name, root):
        if os.path.isfile(path):
            continue
        if src.gzipped and os.path.isfile(path + ".gz"):
            _gunzip(path + ".gz", path)
            continue
        missing.append(path + ("(.gz)" if src.gzipped else ""))
    if missing:
        folder = os.path.join(os.path.abspath(root), src.folder)
        raise DatasetNotFoundError(
            f"dataset={name}: files not found: {', '.join(missing)}. Copy {src.get} into {folder}"
            f"{' (gzipped or not)' if src.gzipped else ''}, or run once with dataset.download=true on a machine "
            f"with a network (it downloads into dataset.root={root}).")


def _gunzip(src: str, dst: str) -> None:
    tmp = f"{dst}.partial-{os.getpid()}"  # atomic: a concurrent reader never sees half a file
    try:
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, dst)
    except OSError as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise DatasetNotFoundError(f"could not unpack {src}: {err}") from None


def _torchvision_split(name: str, root: str, train: bool, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images (n, C, H, W), int64 labels) from torchvision's class for `name`; errors in one line."""
    import torchvision.datasets

    src = SOURCES[name]
    cls = getattr(torchvision.datasets, src.cls)
    folder = os.path.join(os.path.abspath(root), src.folder)
    if download:
        try:
            check_files(name, root)  # unpacks .gz files already there, which torchvision would fetch again
        except DatasetNotFoundError:
            pass
        try:
            ds = cls(root, train=train, download=True)
        except Exception as err:  # noqa: BLE001 -- no network, a moved mirror, a full disk: all one message
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DatasetNotFoundError(
                f"dataset={name}: dataset.download=true could not download into {os.path.abspath(root)} "
                f"({type(err).__name__}: {first}). Without a network, copy {src.get} into {folder}.") from None
    else:
        check_files(name, root)
        try:
            ds = cls(root, train=train, download=False)
        except Exception as err:  # noqa: BLE001 -- corrupt: checksum, format asserts, unpickling, truncation
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DatasetNotFoundError(
                f"dataset={name}: the files under {folder} could not be read ({type(err).__name__}: {first}). "
                f"Replace them with {src.get}, or delete them and run with dataset.download=true on a machine "
                f"with a network.") from None
    images = np.asarray(ds.data)
    images = images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)  # MNIST (n,H,W); CIFAR NHWC
    return np.ascontiguousarray(images), np.asarray(ds.targets, dtype=np.int64)


def _subsample(n: int, limit: int | None, seed: int, salt: int) -> np.ndarray | None:
    """Sorted indices of a seeded random subset of `limit` of `n` (None: keep all)."""
    if limit is None or limit >= n:
        return None
    return np.sort(np.random.default_rng([seed, salt]).choice(n, size=int(limit), replace=False))


def _standardize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 copies standardized with train statistics: per channel (axis 1) for images, per feature
    for flat data."""
    axes = (0,) + tuple(range(2, train.ndim))
    mean = train.mean(axis=axes, dtype=np.float64, keepdims=True)
    std = train.std(axis=axes, dtype=np.float64, keepdims=True)
    std[std == 0] = 1.0  # constant pixels
    out = []
    for x in (train, test):
        x = x.astype(np.float32)  # a copy, standardized in place (CIFAR-10's train split is 600 MB as float32)
        x -= mean.astype(np.float32)
        x /= std.astype(np.float32)
        out.append(x)
    return out[0], out[1]


def load_dataset(cfg, seed: int) -> Dataset:
    """The dataset `cfg.name` (a `dataset` config), optionally subsampled to max_train / max_test.

    digits: seeded stratified split with `test_fraction`. mnist / fashion_mnist / cifar10: the dataset's
    own train/test split, read by torchvision from `cfg.root`; missing files raise DatasetNotFoundError.
    """
    name = cfg.name
    max_train, max_test = _opt(cfg, "max_train", None), _opt(cfg, "max_test", None)
    if name == "digits":
        data = load_digits(seed, _opt(cfg, "test_fraction", 0.2))
        if max_train is None and max_test is None:
            return data  # unchanged: the offline default
        x_tr, y_tr, x_te, y_te = data.x_train, data.y_train, data.x_test, data.y_test
    elif name in SOURCES:
        root, download = str(_opt(cfg, "root", "data")), bool(_opt(cfg, "download", False))
        x_tr, y_tr = _torchvision_split(name, root, True, download)
        x_te, y_te = _torchvision_split(name, root, False, False)
    else:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}")
    keep = _subsample(len(y_tr), max_train, seed, 1)
    if keep is not None:
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    keep = _subsample(len(y_te), max_test, seed, 2)
    if keep is not None:
        x_te, y_te = x_te[keep], y_te[keep]
    x_tr, x_te = _standardize(x_tr, x_te)  # statistics of the training samples kept
    return Dataset(x_tr, y_tr, x_te, y_te, 10)


def partition(labels: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int,
              min_size: int = 2, shards_per_client: int = 2) -> list[np.ndarray]:
    """Split sample indices among clients; every scheme is disjoint, covers all samples and is seeded.

    - `iid`: shuffled equal shares.
    - `dirichlet`: label skew, the usual recipe (per class, client shares ~ Dir(alpha)), redrawn until
      every client has at least `min_size` samples so no client is empty.
    - `shards` (McMahan et al. 2017): sort by label, cut into num_clients * shards_per_client equal
      shards, give each client `shards_per_client` random shards, so each holds about that many classes.
    """
    rng = np.random.default_rng(seed)
    n = len(labels)
    if num_clients > n // min_size:
        raise ValueError(f"{num_clients} clients cannot each get {min_size} of {n} samples")
    if scheme == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), num_clients)]
    if scheme == "shards":
        num_shards = num_clients * shards_per_client
        if shards_per_client < 1 or num_shards > n:
            raise ValueError(f"cannot cut {n} samples into {num_clients} x {shards_per_client} shards")
        by_label = rng.permutation(n)  # random order within a class, then a stable sort by label
        by_label = by_label[np.argsort(labels[by_label], kind="stable")]
        shards = np.array_split(by_label, num_shards)
        owner = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in owner]
    if scheme != "dirichlet":
        raise ValueError(f"unknown partition {scheme!r}; use one of {', '.join(PARTITIONS)}")
    classes = np.unique(labels)
    for _ in range(1000):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ValueError(f"Dirichlet(alpha={alpha}) left a client with fewer than {min_size} samples; raise alpha")


def partition_summary(labels: np.ndarray, parts: list[np.ndarray]):
    """One row per client: `samples`, `classes` (how many distinct labels) and a count per class
    (`class_0`, `class_1`, ...); the index is the client id."""
    import pandas as pd

    classes = np.unique(labels)
    counts = np.stack([np.bincount(np.searchsorted(classes, labels[p]), minlength=len(classes)) for p in parts])
    table = pd.DataFrame(counts, columns=[f"class_{c}" for c in classes])
    table.insert(0, "classes", (counts > 0).sum(axis=1))
    table.insert(0, "samples", counts.sum(axis=1))
    table.index.name = "client"
    return table


def client_partitions(cfg, labels: np.ndarray) -> list[np.ndarray]:
    """The run's client partitions, from the config alone (the driver and every worker agree)."""
    d = cfg.dataset
    return partition(labels, cfg.fl.num_clients, d.partition, d.alpha, cfg.seed, min_size=1,
                     shards_per_client=d.shards_per_client)
