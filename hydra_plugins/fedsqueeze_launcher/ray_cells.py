"""`hydra/launcher=ray_cells`: each cell of a sweep as a Ray task with its own pool (fl/sweep.py says how).

Hydra loads launchers only from the `hydra_plugins` namespace, hence this module; its config is
conf/hydra/launcher/ray_cells.yaml. Imported by Hydra's plugin scan at every start: Ray loads only at launch.
"""
from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, open_dict

from fl.runtime import raystart
from fl.sweep import UNFINISHED, cell_bundles, run_cell

log = logging.getLogger(__name__)


class RayCellLauncher(Launcher):
    """Runs each cell of a Hydra sweep as a Ray task (see the module's docstring)."""

    def __init__(self, address: Optional[str] = None, driver_cpus: float = 1.0) -> None:
        self.address, self.driver_cpus = address, float(driver_cpus)
        self.config = self.hydra_context = self.task_function = None
        self.nodes: list[str] = []  # the node each cell of the last launch ran on, in order

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not 0 < self.driver_cpus < math.inf:  # before Ray starts: Ray would refuse the reservation, or never fill it
            print(f"fedsqueeze: configuration refused: hydra.launcher.driver_cpus must be > 0 and finite, got "
                  f"{self.driver_cpus}", file=sys.stderr)
            sys.exit(2)
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        raystart.start(self.address)  # a local Ray (stopped below), or this process joins the cluster
        cell = ray.remote(max_retries=0)(run_cell)
        try:
            cells, first_of, planned, too_big = {}, {}, [], []
            for idx, overrides in enumerate(job_overrides, initial_job_idx):
                config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(config):
                    config.hydra.job.id, config.hydra.job.num = f"ray_{idx}", idx
                    if config.backend == "ray" and config.ray.num_workers is None:
                        config.ray.num_workers = 1  # what cell_bundles reserves
                same = first_of.setdefault(_computes(config), idx)
                bundles = cell_bundles(config, self.driver_cpus) if same == idx else None
                if bundles is not None and (why := _does_not_fit(bundles)):
                    too_big.append(f"  #{idx} {' '.join(filter_overrides(overrides))}: {why}")
                planned.append((idx, overrides, config, same, bundles))
            if too_big:  # before any cell starts: its reservation would wait forever
                print(f"fedsqueeze: {len(too_big)} of {len(planned)} cells fit on no node of the cluster; none ran:",
                      *too_big, sep="\n", file=sys.stderr)
                sys.exit(2)
            for idx, overrides, config, same, bundles in planned:
                if same != idx:  # the same rows as an earlier cell: run once (two at once would share a folder)
                    log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))} (the same configuration as #{same})")
                    cells[idx] = (None, same, config, overrides)  # the cell it repeats, in place of a task
                    continue
                group = placement_group(bundles, strategy="STRICT_PACK")
                strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0,
                                                            placement_group_capture_child_tasks=True)
                ref = cell.options(num_cpus=self.driver_cpus, scheduling_strategy=strategy).remote(
                    self.hydra_context, self.task_function, config, os.getcwd())
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))} ({len(bundles)} bundles)")
                cells[idx] = (group, ref, config, overrides)
            done: dict[int, tuple[str, JobReturn]] = {}
            waiting = {ref: idx for idx, (group, ref, _, _) in cells.items() if group is not None}
            while waiting:  # in the order cells finish: each frees its reservation for a waiting cell at once
                ready, _ = ray.wait(list(waiting), num_returns=1)
                idx = waiting.pop(ready[0])
                group, ref, config, overrides = cells[idx]
                try:
                    done[idx] = ray.get(ref)
                except Exception as err:  # the task itself failed (its process died): the sweep goes on
                    log.error(f"\t#{idx} : {type(err).__name__}: {err}")
                    # a failed cell, as the task function returns one: Hydra's sweeper raises a FAILED return once
                    # the launch is over, ending the sweep without naming the cells that did not finish
                    done[idx] = "", JobReturn(overrides=list(overrides), cfg=config, status=JobStatus.COMPLETED,
                                              _return_value="failed")
                remove_placement_group(group)
                node, ret = done[idx]
                state = ret._return_value if isinstance(ret._return_value, str) else ret.status.name.lower()
                log.info(f"\t#{idx} : {state} on node {node or '(lost)'}")
            self.nodes, returns = [], []
            for idx, (group, ref, config, overrides) in cells.items():
                if group is None:  # a repeat: the result of the cell it repeats, under its own overrides
                    node, first = done[ref]
                    ret = JobReturn(overrides=list(overrides), cfg=config, status=first.status,
                                    _return_value=first._return_value)
                else:
                    node, ret = done[idx]
                    if ret.status == JobStatus.FAILED or isinstance(ret._return_value, str):
                        status = ret._return_value if isinstance(ret._return_value, str) else "failed"
                        UNFINISHED.append(f"{status}: {' '.join(overrides)}")
                self.nodes.append(node)
                returns.append(ret)
            return returns
        finally:
            raystart.stop()


def _does_not_fit(bundles: list[dict]) -> str | None:
    """Why no node of the cluster could ever hold a cell's reservation (None: one could)."""
    import ray

    need: dict[str, float] = {}
    for bundle in bundles:
        for resource, amount in bundle.items():
            need[resource] = need.get(resource, 0.0) + amount
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    if not any(all(node.get(r, 0.0) >= amount for r, amount in need.items()) for node in nodes):
        largest = max(nodes, key=lambda node: node.get("CPU", 0.0), default={})
        return (f"asks for {need} on one node (its driver and its ray.num_workers workers); the largest node has "
                f"{({r: largest.get(r, 0.0) for r in need})}: lower ray.num_workers, ray.num_cpus_per_worker or "
                f"hydra.launcher.driver_cpus")
    return None


def _computes(config: DictConfig) -> str:
    """What a cell computes and where its rows go (its config hash and results.dir; the raw config if it does not
    validate: it fails on its own). Cells equal in both write one folder, so one runs."""
    import copy

    from fl.config import ConfigError, as_dict, validate
    from fl.results import config_hash

    task = copy.deepcopy(config)
    with open_dict(task):
        del task["hydra"]  # as the cell's task function receives it
    try:
        return f"{config_hash(as_dict(validate(task)))} in {os.path.abspath(str(task.results.dir))}"
    except ConfigError:
        return repr(task)
