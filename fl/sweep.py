"""Hydra's side of a sweep: the callback that ends a sweep's warm pool, and the cells of
`hydra/launcher=ray_cells`, which runs a sweep's cells concurrently as Ray tasks, locally or on a Ray cluster
(the launcher class is in hydra_plugins/fedsqueeze_launcher, where Hydra looks for launchers; its config is
conf/hydra/launcher/ray_cells.yaml).

hydra-ray-launcher, Hydra's own plugin, is not used: docs/sweeps.md says why. Here each cell is one Ray
task in its own placement group: one bundle for the cell's driver and one per pool worker
(`ray.num_workers` x `ray.num_cpus_per_worker` / `ray.num_gpus_per_worker`), reserved together on one node
(STRICT_PACK: the cell's replies stay in that node's shared memory), so Ray's scheduler runs as many cells
at once as the cluster holds and a cell never waits for workers it cannot get. The cell's pool is created
inside its task and placed in its group. Rows land in `results.dir` as in any run and resume the same way:
on a cluster of several machines it must be a shared folder, at the same path on every node.
"""
from __future__ import annotations

import os

from hydra.core.utils import run_job, setup_globals
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


# Cells of this process's sweep that did not finish (failed, refused once the data loaded, or left to another
# process running them): `simulate.py` exits non-zero after the sweep when any did, so `simulate -m ... && report`
# stops there. The ray_cells launcher adds its cells' from what their tasks return; the checked sweeper (the
# default) sets the list from every cell's return once the sweep is over, whichever process ran the cell.
UNFINISHED: list[str] = []


def unfinished(status: str, overrides) -> str:
    """Record a cell that did not finish; returns `status` (the cell's return value, which ray_cells reads)."""
    UNFINISHED.append(f"{status}: {' '.join(overrides)}")
    return status


class EndWarmPool(Callback):
    """At a multirun's end, stop the pool and the Ray its cells shared (fl.runtime.warm)."""

    def on_multirun_end(self, config, **kwargs) -> None:
        from fl.runtime import warm

        warm.close()


def cell_bundles(cfg: DictConfig, driver_cpus: float) -> list[dict]:
    """What one cell reserves: its driver, then one bundle per pool worker (none with backend=inline).
    A cell that leaves `ray.num_workers` null gets one worker here (on one machine it means one per core); no more
    than its cohort, as the pool makes (fl/runtime/pool.py)."""
    if cfg.backend != "ray":
        return [{"CPU": driver_cpus}]
    workers = min(int(cfg.ray.num_workers or 1), int(cfg.fl.clients_per_round))
    worker = {"CPU": float(cfg.ray.num_cpus_per_worker)}
    if cfg.ray.num_gpus_per_worker:
        worker["GPU"] = float(cfg.ray.num_gpus_per_worker)
    return [{"CPU": driver_cpus}] + [dict(worker) for _ in range(workers)]


def run_cell(hydra_context, task_function, config: DictConfig, cwd: str):
    """One cell, inside its Ray task: Hydra's job as the basic launcher runs it, in the sweep's folder."""
    import ray

    setup_globals()
    if os.path.isdir(cwd):  # relative results.dir and sweep dir resolve as on the machine that launched
        os.chdir(cwd)
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    return ray.get_runtime_context().get_node_id(), ret
