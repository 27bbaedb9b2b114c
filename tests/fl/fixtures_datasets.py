"""Tiny datasets written in the exact on-disk formats torchvision reads, so tests run the real loaders.

- MNIST / Fashion-MNIST: IDX files (big-endian header, uint8 payload) in `<root>/<Class>/raw/`.
- CIFAR-10: pickled batches (dicts with `data` (n, 3072) uint8 and `labels`) in `<root>/cifar-10-batches-py/`.
  torchvision checks their md5 against the real dataset's, so `cifar_checksums` returns the md5s of the
  files written here for a test to put on the class (the production loader still uses torchvision's class).
"""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np


def dataset_cfg(name: str, root, **extra):
    """A `dataset` config reading `name` from `root` (no download, no subsampling unless `extra` says so)."""
    from omegaconf import OmegaConf

    return OmegaConf.create({"name": name, "root": str(root), "download": False, "test_fraction": 0.2,
                             "max_train": None, "max_test": None, **extra})


from experiments.mnist_digits import MNIST_FILES, digits_as_mnist_arrays, write_idx, write_mnist  # noqa: F401


def synthetic_images(n: int, shape: tuple[int, ...], seed: int, num_classes: int = 10):
    """uint8 images whose class shows as a brighter horizontal band (learnable, not meaningful), labels 0..9."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % num_classes
    rng.shuffle(y)
    x = rng.integers(0, 100, size=(n, *shape)).astype(np.int32)
    rows = shape[-2]
    for c in range(num_classes):
        band = slice(c * rows // num_classes, (c + 1) * rows // num_classes)
        x[y == c, ..., band, :] += 150
    return x.clip(0, 255).astype(np.uint8), y.astype(np.uint8)


def write_cifar10(root: Path, x_train, y_train, x_test, y_test) -> dict[str, str]:
    """(n, 3, 32, 32) uint8 images as CIFAR-10's five training batches, test batch and meta file;
    returns {file name: md5} of what was written."""
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    blobs = {}
    for i, part in enumerate(np.array_split(np.arange(len(y_train)), 5), start=1):
        blobs[f"data_batch_{i}"] = {"batch_label": f"training batch {i} of 5",
                                    "data": x_train[part].reshape(len(part), -1),
                                    "labels": [int(v) for v in y_train[part]]}
    blobs["test_batch"] = {"batch_label": "testing batch 1 of 1",
                           "data": x_test.reshape(len(x_test), x_test[0].size if len(x_test) else 3072),
                           "labels": [int(v) for v in y_test]}
    blobs["batches.meta"] = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                             "horse", "ship", "truck"], "num_vis": 3072, "num_cases_per_batch": 10000}
    md5 = {}
    for name, blob in blobs.items():
        data = pickle.dumps(blob, protocol=2)
        (folder / name).write_bytes(data)
        md5[name] = hashlib.md5(data).hexdigest()
    return md5


def cifar_checksums(md5: dict[str, str]) -> dict[str, object]:
    """The CIFAR10 class attributes that carry md5s, pointing at the files `write_cifar10` wrote."""
    import torchvision.datasets

    cls = torchvision.datasets.CIFAR10
    return {"train_list": [[name, md5[name]] for name, _ in cls.train_list],
            "test_list": [[name, md5[name]] for name, _ in cls.test_list],
            "meta": {**cls.meta, "md5": md5[cls.meta["filename"]]}}
