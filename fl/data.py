"""Datasets and client partitions, all seeded so every worker rebuilds the same split on its own."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Dataset:
    x_train: np.ndarray  # float32, (n, features)
    y_train: np.ndarray  # int64
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def num_features(self) -> int:
        return int(np.prod(self.x_train.shape[1:]))


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


def load_dataset(cfg, seed: int) -> Dataset:
    if cfg.name == "digits":
        return load_digits(seed, cfg.test_fraction)
    raise ValueError(f"unknown dataset {cfg.name!r}")


def partition(labels: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int,
              min_size: int = 2) -> list[np.ndarray]:
    """Split sample indices among clients: IID (shuffled equal shares) or Dirichlet(alpha) label skew.

    Dirichlet follows the usual recipe (per class, client shares ~ Dir(alpha)), redrawn until every
    client has at least `min_size` samples so no client is empty.
    """
    rng = np.random.default_rng(seed)
    n = len(labels)
    if num_clients > n // min_size:
        raise ValueError(f"{num_clients} clients cannot each get {min_size} of {n} samples")
    if scheme == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), num_clients)]
    if scheme != "dirichlet":
        raise ValueError(f"unknown partition {scheme!r}; use 'iid' or 'dirichlet'")
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
