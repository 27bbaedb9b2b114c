"""Datasets, seeded so every worker rebuilds the same train/test split on its own (client partitions: fl.partitions).

Datasets: `digits` (scikit-learn's bundled 8x8 digits, the offline default) and `mnist`,
`fashion_mnist`, `cifar10` read by torchvision's own dataset classes from files the user placed under
`dataset.root` or found in `dataset.system_dirs` (Debian's packages; gzipped files unpacked into `dataset.cache`),
downloaded into the root only with `dataset.download=true`. Images come out as float32
(n, C, H, W) standardized per channel with train statistics; digits as (n, 64). Labels are int64.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import math
import os
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fl.errors import ConfigError
from fl.results import write_atomic

DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10")
INPUT_SHAPES = {"digits": (64,), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
NUM_CLASSES = dict.fromkeys(DATASETS, 10)


@dataclass
class Dataset:
    x_train: np.ndarray  # float32, (n, features) or (n, C, H, W)
    y_train: np.ndarray  # int64
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

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
    debian: str = ""    # the Debian package that installs them, if any


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
SOURCES = {
    "mnist": _Source("MNIST", os.path.join("MNIST", "raw"), _MNIST_FILES, True,
                     "the four MNIST IDX files (e.g. from https://ossci-datasets.s3.amazonaws.com/mnist/)"),
    "fashion_mnist": _Source("FashionMNIST", os.path.join("FashionMNIST", "raw"), _MNIST_FILES, True,
                             "the four Fashion-MNIST IDX files (https://github.com/zalandoresearch/fashion-mnist)",
                             "dataset-fashion-mnist"),
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
    """scikit-learn's bundled 8x8 digits: stratified seeded split, standardized with train statistics.

    The file is read and split here, as sklearn's load_digits and train_test_split(stratify=y) do (a test
    checks that both give the same arrays), without importing sklearn and scipy (the driver's memory they would
    take: docs/performance.md).
    """
    path = os.path.join(importlib.util.find_spec("sklearn").submodule_search_locations[0],
                        "datasets", "data", "digits.csv.gz")
    with gzip.open(path, mode="rt", encoding="utf-8") as f:
        table = np.loadtxt(f, delimiter=",")
    x, y = table[:, :-1], table[:, -1].astype(int)
    train, test = stratified_split(y, test_fraction, seed)
    x, y = x.astype(np.float32), y.astype(np.int64)
    x_tr, x_te, y_tr, y_te = x[train], x[test], y[train], y[test]
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0  # constant border pixels
    return Dataset((x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te, NUM_CLASSES["digits"])


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices, as sklearn's StratifiedShuffleSplit(test_size, random_state=seed) draws them."""
    rng = np.random.RandomState(seed)
    n_test = math.ceil(test_fraction * len(y))
    n_train = len(y) - n_test
    _, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    if min(n_train, n_test) < len(counts):  # sklearn refuses these too; an empty train split would crash later
        raise ConfigError(f"dataset.test_fraction={test_fraction} splits the {len(y)} samples into {n_train} to train "
                          f"and {n_test} to test: a stratified split needs at least one per class ({len(counts)}) "
                          "in each")
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    train, test = [], []
    for i, members in enumerate(by_class):
        shuffled = members.take(rng.permutation(counts[i]), mode="clip")
        train.extend(shuffled[:n_i[i]])
        test.extend(shuffled[n_i[i]:n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)


def _approximate_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Per-class draws closest to proportional; leftover draws go to the largest remainders, ties at random."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    need = int(draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (tied,) = np.where(remainder == value)
            now = min(len(tied), need)
            floored[rng.choice(tied, size=now, replace=False)] += 1
            need -= now
            if need == 0:
                break
    return floored.astype(int)


def expected_files(name: str, root: str) -> list[str]:
    """Full paths of the files torchvision reads for dataset `name` under `root`."""
    src = SOURCES[name]
    return [os.path.join(os.path.abspath(root), src.folder, f) for f in src.files]


@dataclass(frozen=True)
class Located:
    """Where a dataset's files were found: `folder` holds every file, each plain or gzipped (`gz` lists
    the gzipped ones); `in_layout` says whether torchvision can read `folder`'s root as it is."""
    folder: str
    gz: tuple
    in_layout: bool

    def source(self, f: str) -> str:
        """The path of file `f` as found (`<f>.gz` where it is gzipped)."""
        return os.path.join(self.folder, f + (".gz" if f in self.gz else ""))


def locate(name: str, root: str, system_dirs=()) -> Located:
    """Find `name`'s files without writing anything: `<root>/<torchvision's folder>` first, then each
    system folder (flat, as Debian's `dataset-fashion-mnist` installs them). Raises
    DatasetNotFoundError naming every place looked at and both ways to get the data, or naming the missing
    files where root holds only some (a system copy would otherwise be read in their place)."""
    src = SOURCES[name]
    places = [(os.path.join(os.path.abspath(root), src.folder), True)]
    places += [(os.path.abspath(os.path.expanduser(str(d))), False) for d in system_dirs or ()]
    for folder, in_layout in places:
        gz, absent = [], []
        for f in src.files:
            path = os.path.join(folder, f)
            if os.path.isfile(path):
                continue
            if src.gzipped and os.path.isfile(path + ".gz"):
                gz.append(f)
                continue
            absent.append(path + ("(.gz)" if src.gzipped else ""))
        if not absent:
            legacy = src.files == _MNIST_FILES and _legacy_beside(folder)
            return Located(folder, tuple(gz), in_layout and not gz and not legacy)
        if in_layout and len(absent) < len(src.files):  # files put under root: never passed over for another copy
            raise DatasetNotFoundError(
                f"dataset={name}: {folder} holds only some of its files; missing: {', '.join(absent)}. Complete "
                f"them from {src.get}, or remove them to read the system copy (or download).")
    missing = [path + ("(.gz)" if src.gzipped else "") for path in expected_files(name, root)
               if not os.path.isfile(path) and not (src.gzipped and os.path.isfile(path + ".gz"))]
    also = f"; also looked in {', '.join(folder for folder, _ in places[1:])} (flat)" if places[1:] else ""
    apt = f"run `apt-get install {src.debian}` (it installs them in /usr/share/datasets/), " if src.debian else ""
    raise DatasetNotFoundError(
        f"dataset={name}: files not found: {', '.join(missing)}{also}. To get them: {apt}copy {src.get} into "
        f"{places[0][0]}{' (gzipped or not)' if src.gzipped else ''}, or run once with dataset.download=true on a "
        f"machine with a network (it downloads into dataset.root={root}).")


def _legacy_beside(raw: str) -> bool:
    """Whether `processed/{training,test}.pt`, left beside `raw/` by an older torchvision, are there: its MNIST
    classes read those in place of the raw files, so such a root is read from a copy of its raw files."""
    processed = os.path.join(os.path.dirname(raw), "processed")
    return all(os.path.isfile(os.path.join(processed, f)) for f in ("training.pt", "test.pt"))


def default_cache() -> str:
    """Where unpacked copies go: $XDG_CACHE_HOME/fedsqueeze, else ~/.cache/fedsqueeze."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fedsqueeze")


def readable_root(name: str, found: Located, cache: str | None) -> str:
    """A root torchvision can read `name` from. Files already in its layout are read where they are;
    otherwise they are unpacked (or copied) once into the cache, never beside the originals: a folder
    the run does not own is never written. A cached copy is made again whenever its source's size or
    modification time, or its own size, differs from the copy's stamp (`<file>.source`)."""
    src = SOURCES[name]
    if found.in_layout:
        return found.folder[:-len(src.folder)]
    tag = hashlib.sha256(found.folder.encode()).hexdigest()[:12]  # one cache per source folder
    root = os.path.join(os.path.abspath(os.path.expanduser(cache or default_cache())), f"{name}-{tag}")
    target = os.path.join(root, src.folder)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as err:
        raise DatasetNotFoundError(f"dataset={name}: cannot create the cache {target} ({err}); set "
                                   "dataset.cache to a folder you can write") from None
    for f in src.files:
        source = found.source(f)
        dst = os.path.join(target, f)
        stamp = _stamp(source)
        if os.path.isfile(dst) and _read(dst + ".source") == f"{stamp} -> {os.path.getsize(dst)}":
            continue  # the copy of this source, whole (a cut copy differs in its size)
        _unpack(source, dst, f in found.gz)
        # after the copy: a copy without its stamp is made again
        write_atomic(Path(dst + ".source"), f"{stamp} -> {os.path.getsize(dst)}")
    return root


def _stamp(path: str) -> str:
    """What identifies a source file's version: its path, size and modification time to the nanosecond (a copy
    that keeps an older time, as dpkg, tar and cp -p do, still differs in one of them)."""
    st = os.stat(path)
    return f"{os.path.abspath(path)} {st.st_size} {st.st_mtime_ns}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def check_files(name: str, root: str, system_dirs=()) -> None:
    """Raise DatasetNotFoundError unless `name`'s files are under `root` or a system folder (writes nothing)."""
    if name in SOURCES:
        locate(name, root, system_dirs)


def _unpack(src: str, dst: str, gzipped: bool) -> None:
    tmp = f"{dst}.partial-{os.getpid()}"  # atomic: a concurrent reader never sees half a file
    try:
        with (gzip.open(src, "rb") if gzipped else open(src, "rb")) as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, dst)
    except (OSError, EOFError, zlib.error) as err:  # zlib.error: a corrupt (not truncated) .gz
        raise DatasetNotFoundError(f"could not unpack {src} into {dst}: {err}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _torchvision_split(name: str, root: str, train: bool, download: bool, system_dirs=(),
                       cache: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images (n, C, H, W), int64 labels) from torchvision's class for `name`; errors in one line."""
    import torchvision.datasets

    src = SOURCES[name]
    cls = getattr(torchvision.datasets, src.cls)
    folder = os.path.join(os.path.abspath(root), src.folder)
    found = None
    try:
        found = locate(name, root, system_dirs)
    except DatasetNotFoundError:
        if not download:
            raise
    if found is None:
        try:
            ds = cls(root, train=train, download=True)
        except Exception as err:  # noqa: BLE001 -- no network, a moved mirror, a full disk: all one message
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DatasetNotFoundError(
                f"dataset={name}: dataset.download=true could not download into {os.path.abspath(root)} "
                f"({type(err).__name__}: {first}). Without a network, copy {src.get} into {folder}.") from None
    else:
        readable = readable_root(name, found, cache)
        if src.files == _MNIST_FILES:  # torchvision's reader fails on a bad header with errors naming no file
            for f in src.files:
                _check_idx(name, os.path.join(readable, src.folder, f), None if found.in_layout else found.source(f))
        try:
            ds = cls(readable, train=train, download=False)
        except Exception as err:  # noqa: BLE001 -- corrupt: checksum, format asserts, unpickling, truncation
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            where = found.folder if found.in_layout else (
                f"{found.folder} (read from their copy in {os.path.join(readable, src.folder)}: delete the copy "
                "to have it made again; if the error stays, the originals are at fault)")
            bad = _failed_checksums(cls, os.path.join(readable, src.folder))
            which = f"; md5 not the dataset's: {', '.join(bad)}" if bad else ""
            raise DatasetNotFoundError(
                f"dataset={name}: the files under {where} could not be read ({type(err).__name__}: {first}){which}. "
                f"Replace them with {src.get}, or delete them and run with dataset.download=true on a machine with "
                "a network.") from None
    images = np.asarray(ds.data)
    images = images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)  # MNIST (n,H,W); CIFAR NHWC
    labels = np.asarray(ds.targets, dtype=np.int64)
    _check_split(name, images, labels, found.folder if found else folder, train)
    return np.ascontiguousarray(images), labels


def _failed_checksums(cls, folder: str) -> list[str]:
    """The files in `folder` whose md5 is not the one `cls` checks (CIFAR-10's lists; MNIST's class checks none):
    torchvision's own error names no file."""
    from torchvision.datasets.utils import check_integrity

    listed = [*getattr(cls, "train_list", []), *getattr(cls, "test_list", [])]
    if getattr(cls, "meta", None):
        listed.append([cls.meta["filename"], cls.meta["md5"]])
    return [os.path.join(folder, f) for f, md5 in listed if not check_integrity(os.path.join(folder, f), md5)]


def _check_idx(name: str, path: str, original: str | None = None) -> None:
    """Refuse an IDX file whose header is not uint8 labels (1 dimension) or images (3), or whose size is not its
    header's, naming the file (and for a copy in the cache, its `original`)."""
    dims = 1 if "labels" in os.path.basename(path) else 3
    with open(path, "rb") as fh:
        head = fh.read(4 + 4 * dims)
    problem = None
    if len(head) < 4 + 4 * dims:
        problem = f"{len(head)} bytes, shorter than its header"
    elif head[:3] != b"\x00\x00\x08" or head[3] != dims:
        problem = (f"magic number {head[:4].hex()}, expected 0000080{dims} (uint8 "
                   f"{'labels' if dims == 1 else 'images'}, {dims} dimension{'s' if dims > 1 else ''})")
    else:
        sizes = struct.unpack(f">{dims}I", head[4:])
        want, size = 4 + 4 * dims + math.prod(sizes), os.path.getsize(path)
        if size != want:
            problem = f"{size} bytes where its header ({' x '.join(map(str, sizes))}) says {want}"
    if problem:
        copy = (f" (the copy of {original}: delete it to have it made again; if the error stays, the original is at "
                "fault)") if original else ""
        raise DatasetNotFoundError(f"dataset={name}: {path}{copy} is no IDX file its reader can take: {problem}")


def _check_split(name: str, images: np.ndarray, labels: np.ndarray, folder: str, train: bool) -> None:
    """torchvision checks no MNIST checksum: files that parse but disagree (a label file of another length, a
    label out of range, images of another shape) are refused here, naming the folder, before any training."""
    split = "train" if train else "test"
    problem = None
    if images.shape[1:] != INPUT_SHAPES[name]:
        problem = f"images of shape {images.shape[1:]}, expected {INPUT_SHAPES[name]}"
    elif len(images) != len(labels):
        problem = f"{len(images)} images but {len(labels)} labels"
    elif not len(labels):
        problem = "no samples"  # else the first evaluation divides by a test split of none
    elif labels.min() < 0 or labels.max() >= NUM_CLASSES[name]:
        problem = f"labels from {labels.min()} to {labels.max()}, expected 0 to {NUM_CLASSES[name] - 1}"
    if problem:
        raise DatasetNotFoundError(f"dataset={name}: the {split} files under {folder} disagree: {problem}. "
                                   f"Replace them with {SOURCES[name].get}.")


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
    own train/test split, read by torchvision from `cfg.root` or else a `cfg.system_dirs` folder (through a copy
    in `cfg.cache` where needed: `readable_root`); missing files raise DatasetNotFoundError unless `cfg.download`
    fetches them into the root.
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
        where = {"system_dirs": list(_opt(cfg, "system_dirs", []) or []), "cache": _opt(cfg, "cache", None)}
        x_tr, y_tr = _torchvision_split(name, root, True, download, **where)
        x_te, y_te = _torchvision_split(name, root, False, False, **where)
    else:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}")
    keep = _subsample(len(y_tr), max_train, seed, 1)
    if keep is not None:
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    keep = _subsample(len(y_te), max_test, seed, 2)
    if keep is not None:
        x_te, y_te = x_te[keep], y_te[keep]
    x_tr, x_te = _standardize(x_tr, x_te)  # statistics of the training samples kept
    return Dataset(x_tr, y_tr, x_te, y_te, NUM_CLASSES[name])
