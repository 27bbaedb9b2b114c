"""A sweep's Ray, worker pool and dataset, kept from one cell to the next (no torch, no Hydra here).

A Hydra multirun on one machine runs its cells one after another in one process. Ray starts for the first
cell; the pool (worker processes with torch imported) serves every later cell of the same shape (backend,
device, size, resources per worker and Ray address: `pool_key`), re-attached to that cell's dataset and plan,
which resets every client's state; the dataset is loaded once while cells share it. A cell that raises takes its
pool with it (the next cell starts a fresh one). `close` ends the pool and the Ray started here: at the sweep's
end (fl.sweep's Hydra callback) and at exit, Ctrl-C included.
"""
from __future__ import annotations

import atexit
import json

from fl.runtime import raystart

_pool = None
_pool_key: tuple | None = None
_data_key: str | None = None
_data = None
_exit_hook = False


def keep() -> None:
    """Keep what the coming cells start until `close` (called at exit at the latest)."""
    global _exit_hook
    if not _exit_hook:
        atexit.register(close)
        _exit_hook = True


def pool_key(cfg, size: int) -> tuple:
    """What a pool must match to serve a cell: its processes' shape, not the cell's model or codec."""
    return (cfg.backend, str(cfg.device), size, float(cfg.ray.num_cpus_per_worker),
            float(cfg.ray.num_gpus_per_worker), cfg.ray.address)


def pool(cfg, size: int, make):
    """The warm pool if it fits this cell, else a new one from `make()` (the old one is closed first)."""
    global _pool, _pool_key
    key = pool_key(cfg, size)
    if _pool is not None and (_pool_key != key or getattr(_pool, "dead", None)):
        discard()
    if _pool is None:
        _pool, _pool_key = make(), key
    else:
        _pool.timeout = cfg.ray.call_timeout_s  # each cell's own, as a new pool's: not part of the pool's shape
        print(f"fedsqueeze: the sweep's warm pool of {size} workers serves this cell", flush=True)
    return _pool


def dataset(dataset_cfg: dict, seed: int, load):
    """The last cell's dataset if this cell asks for the same one, else `load()` (kept for the next cell)."""
    global _data_key, _data
    key = json.dumps([dataset_cfg, seed], sort_keys=True, default=str)
    if key != _data_key:
        _data_key, _data = None, None  # the old arrays go before the new ones load
        _data, _data_key = load(), key
    return _data


def discard() -> None:
    """Close the warm pool (after a cell that raised, or to make room for another shape); Ray stays."""
    global _pool, _pool_key
    pool_now, _pool, _pool_key = _pool, None, None
    if pool_now is not None:
        try:
            pool_now.close()
        except Exception:  # a Ray already shut down (at exit, after Ray's own hook): nothing left to close
            pass


def close() -> None:
    """End the sweep: the pool, the cached dataset and the Ray started for it (never a caller's Ray)."""
    global _data_key, _data
    discard()
    _data_key, _data = None, None
    raystart.stop()
