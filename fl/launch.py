"""Starting a run: refuse a bad configuration, skip a finished one, and start Ray while torch loads.

This module imports neither torch nor the training loop: Ray's start, mostly waiting on the processes it
spawns, begins at once, while a thread imports torch and loads the dataset, and Ray's prestarted workers
import torch as soon as Ray is up. Start-up measurements: docs/performance.md.
"""
from __future__ import annotations

import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from fl.runtime import raystart, warm
from fl.config import as_dict, validate
from fl.results import MODEL_NAME, RunLog, config_hash

if TYPE_CHECKING:
    import pandas as pd


def run(cfg, keep_warm: bool = False) -> pd.DataFrame:
    """Validate, run (or skip, if this configuration already finished) and return the per-round rows.

    `keep_warm` (a sweep's cells, one after another in this process): Ray, the worker pool and the dataset
    stay for the next cell (fl.runtime.warm) until `fl.runtime.warm.close()` or exit. Never inside a Ray
    worker (a cell of fl.sweep's cluster launcher): there each cell's pool lives in the cell's reservation.
    """
    cfg = validate(cfg)
    cfg_dict = as_dict(cfg)
    chash = config_hash(cfg_dict)
    log = RunLog(cfg.results.dir, chash, uuid.uuid4().hex[:12])
    if not log.finished():
        log.claim()  # RunInProgress if another process is running it into this folder
    try:
        if log.finished():  # checked again once claimed: another process may have just finished it
            print(f"fedsqueeze: {log.path} holds a finished run of this configuration; skipping (delete its folder "
                  "to rerun)")
            if cfg.results.save_model and not (log.dir / MODEL_NAME).exists():
                print(f"fedsqueeze: warning: results.save_model is set, but the finished run in {log.dir} ran without "
                      f"it and has no {MODEL_NAME}: run it again into another results.dir (or delete its folder) "
                      "to keep its model", file=sys.stderr)
            return log.read()
        return _run(cfg, cfg_dict, chash, log, keep_warm)
    finally:
        log.release()


def _run(cfg, cfg_dict: dict, chash: str, log: RunLog, keep_warm: bool) -> pd.DataFrame:
    keep = keep_warm and not raystart.in_ray_worker()
    if keep:
        warm.keep()
    else:
        warm.discard()  # a warm pool's workers hold their cores: a run with a pool of its own frees them first
    t_start = time.perf_counter()  # Ray's start to the workers' readiness: round 0's extra cost
    with ThreadPoolExecutor(1, thread_name_prefix="fedsqueeze-load") as loader:
        loading = loader.submit(_prepare, cfg, cfg_dict["dataset"] if keep else None)
        try:
            if cfg.backend == "ray":
                raystart.start(cfg.ray.address)  # the pool uses this Ray; stopped below, however the run ends
            from fl.simulation import callers_torch_rng, simulate

            with callers_torch_rng(cfg):
                return simulate(cfg, cfg_dict, chash, log, t_start, loading, keep)
        except BaseException:
            if keep:
                warm.discard()  # a cell that raised may have left its workers mid-step: never reused
            raise
        finally:
            if cfg.backend == "ray" and not keep:
                raystart.stop()  # only a Ray started here: never the caller's


def _prepare(cfg, kept_dataset: dict | None):
    """While Ray starts: import the training loop (torch), then load the dataset (or take the sweep's)."""
    import fl.simulation  # noqa: F401  (the main thread's import then finds it loaded)
    from fl.data import load_dataset

    if kept_dataset is not None:
        return warm.dataset(kept_dataset, cfg.seed, lambda: load_dataset(cfg.dataset, cfg.seed))
    return load_dataset(cfg.dataset, cfg.seed)
