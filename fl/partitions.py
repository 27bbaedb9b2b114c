"""Client partitions of a dataset's training labels, seeded so every worker rebuilds the same split on its own:
IID, Dirichlet label skew, McMahan's shards and NIID-Bench's label quantity (`partition` says how each is drawn)."""
from __future__ import annotations

import numpy as np

from fl.errors import ConfigError

PARTITIONS = ("iid", "dirichlet", "shards", "labels")


def partition(labels: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int,
              min_size: int = 2, shards_per_client: int = 2, labels_per_client: int = 2) -> list[np.ndarray]:
    """Split sample indices among clients; every scheme is disjoint, covers all samples and is seeded.

    - `iid`: shuffled equal shares.
    - `dirichlet`: label skew, the usual recipe (per class, client shares ~ Dir(alpha)), redrawn until
      every client has at least `min_size` samples so no client is empty.
    - `shards` (McMahan et al. 2017): sort by label, cut into num_clients * shards_per_client equal
      shards, give each client `shards_per_client` random shards, so each holds about that many classes.
    - `labels` (NIID-Bench's label-quantity skew, Li et al. 2022, "#C=k"): client i holds class i mod K and
      `labels_per_client - 1` other random classes, exactly that many; each class is split evenly among its
      holders. Flower's baselines/niid_bench calls it "2 labels per client".

    A split these labels cannot give (too many clients, too few samples per client) is a ConfigError: the run is
    refused before any work.
    """
    rng = np.random.default_rng(seed)
    n = len(labels)
    if num_clients > n // min_size:
        raise ConfigError(f"fl.num_clients={num_clients}: {num_clients} clients cannot each get {min_size} of {n} "
                          "training samples; lower fl.num_clients, or raise dataset.max_train where it is set")
    if scheme == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), num_clients)]
    if scheme == "shards":
        num_shards = num_clients * shards_per_client
        if shards_per_client < 1 or num_shards > n:
            raise ConfigError(f"cannot cut {n} training samples into fl.num_clients x dataset.shards_per_client = "
                              f"{num_clients} x {shards_per_client} shards; lower either, or raise dataset.max_train")
        by_label = rng.permutation(n)  # random order within a class, then a stable sort by label
        by_label = by_label[np.argsort(labels[by_label], kind="stable")]
        shards = np.array_split(by_label, num_shards)
        owner = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in owner]
    if scheme == "labels":
        return _label_quantity(labels, num_clients, labels_per_client, min_size, rng)
    if scheme != "dirichlet":
        raise ConfigError(f"unknown partition {scheme!r}; use one of {', '.join(PARTITIONS)}")
    classes = np.unique(labels)
    for _ in range(1000):
        draws, sizes = [], np.zeros(num_clients, np.int64)
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1] * len(idx)).astype(int)
            draws.append((idx, cuts))
            sizes += np.diff(cuts, prepend=0, append=len(idx))
        if sizes.min() < min_size:  # judged by its counts: a refused draw builds no client's indices
            continue
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx, cuts in draws:
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        return [np.sort(np.concatenate(p)) for p in parts]
    fewer = "no samples" if min_size == 1 else f"fewer than {min_size} samples"
    raise ConfigError(f"Dirichlet(alpha={alpha}) left a client with {fewer} in each of 1000 "
                      f"draws ({n} samples for {num_clients} clients); raise dataset.alpha or dataset.max_train, or "
                      "lower fl.num_clients")


def _label_quantity(labels: np.ndarray, num_clients: int, per_client: int, min_size: int,
                    rng: np.random.Generator) -> list[np.ndarray]:
    classes = np.unique(labels)
    k = len(classes)
    if not 1 <= per_client <= k:
        raise ConfigError(f"dataset.labels_per_client must be in 1..{k} (the classes the {len(labels)} training "
                          f"samples hold), got {per_client}")
    if num_clients < k:
        raise ConfigError(f"the labels partition needs at least one client per class ({k}); got {num_clients} "
                         "clients, which would leave classes unheld")
    held = [np.concatenate([[i % k], rng.permutation(np.delete(np.arange(k), i % k))[:per_client - 1]])
            for i in range(num_clients)]
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in range(k):
        holders = [i for i in range(num_clients) if c in held[i]]
        idx = rng.permutation(np.flatnonzero(labels == classes[c]))
        if len(idx) < len(holders):
            raise ConfigError(f"the labels partition gives class {classes[c]} to {len(holders)} clients but it has "
                              f"{len(idx)} samples, so some would not hold their {per_client} classes; use fewer "
                              "clients or fewer labels per client")
        for client, chunk in zip(holders, np.array_split(idx, len(holders))):
            parts[client].append(chunk)
    out = [np.sort(np.concatenate(p)) for p in parts]
    if min(len(p) for p in out) < min_size:
        raise ConfigError(f"the labels partition left a client with fewer than {min_size} samples; "
                         "use fewer clients or more labels per client")
    return out


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


def partition_args(cfg) -> dict:
    """`partition`'s arguments for the run's clients, from the config alone (the driver and every worker agree)."""
    d = cfg.dataset
    return dict(num_clients=int(cfg.fl.num_clients), scheme=str(d.partition), alpha=float(d.alpha),
                seed=int(cfg.seed), min_size=1, shards_per_client=int(d.shards_per_client),
                labels_per_client=int(d.labels_per_client))


def client_partitions(cfg, labels: np.ndarray) -> list[np.ndarray]:
    """The run's client partitions."""
    return partition(labels, **partition_args(cfg))
