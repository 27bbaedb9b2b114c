"""Starting and stopping the local Ray that a run uses (no torch here).

Only a Ray started here is ever shut down here: a Ray the caller started (a test session, a notebook)
is used and left running.
"""
from __future__ import annotations

import os
from pathlib import Path

from fl.environment import usable_cpus

# Objects up to this size travel inside a call or its reply instead of through the shared-memory
# object store (Ray's own default is 100 KiB): a round's replies of a few hundred KB are cheaper inline
# (docs/performance.md).
DIRECT_OBJECT_BYTES = 4 << 20
SYSTEM_CONFIG = {
    "max_direct_call_object_size": DIRECT_OBJECT_BYTES,
    # Ray's default niceness (15) lets any activity of the driver hold a worker back every round.
    "worker_niceness": 0,
    # Ray's worker processes import the worker (torch) and the client steps while Ray is still starting.
    "preload_python_modules": ["fl.runtime.worker", "fl.rounds.plain", "fl.rounds.masked"],
}

_owned = False  # whether the Ray now running was started by `start`
_address: str | None = None  # the address that Ray was started with (None: a local Ray)


def start(address: str | None = None) -> bool:
    """Start Ray (no dashboard; `address` joins a running cluster, None starts a local one) unless it is already
    running. A Ray this module started for another address (a sweep's warm Ray, then a cell with another
    `ray.address`) is stopped and started again for this one: the cell would otherwise run where it did not ask to.

    Returns whether the Ray now running is ours to shut down (started here and not yet stopped).
    """
    global _owned, _address
    import ray

    if ray.is_initialized() and _owned and (address or None) != _address:
        stop()
    if not ray.is_initialized():
        if not address:
            _workers_import_project()
        local = {} if address else {"num_cpus": usable_cpus(), "_system_config": SYSTEM_CONFIG}
        # "local", not None: None would join the cluster RAY_ADDRESS names or the last `ray start` left on this
        # machine, and refuse our num_cpus there
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=True, configure_logging=False,
                 **local)
        _owned, _address = True, address or None
        if not address:
            _stop_autoscaler_monitor(ray)  # a local fixed-size Ray: nothing to autoscale
    return _owned


def _workers_import_project() -> None:
    """Put this checkout's root on PYTHONPATH, which a local Ray's workers inherit: they preload `fl` as they
    start, before Ray hands them the driver's path, so a clone run without `pip install -e .` would otherwise
    print an import error from every worker."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def in_ray_worker() -> bool:
    """Whether this process is a Ray worker (an actor, or a task such as one cell of fl.sweep's launcher)."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:
        return False


def stop() -> None:
    """Shut down the Ray started by `start`, if it is still running; nothing otherwise."""
    global _owned
    if not _owned:
        return
    _owned = False
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _stop_autoscaler_monitor(ray) -> None:
    """End the autoscaler monitor that our ray.init started, by its PID, as soon as Ray is up.

    A local, fixed-size cluster has nothing for the monitor to do, and it holds memory for the whole run
    (docs/performance.md); left running, it also delays the exit: ray.shutdown stops the GCS first and then
    sends the monitor SIGTERM, whose handler tries to report to the stopped GCS and is killed only after a
    grace period. Ray keeps the process handle in a private attribute: if that changes, nothing is done here.
    """
    try:
        node = ray._private.worker._global_node
        monitors = node.all_processes.get("monitor", []) if node is not None else []
    except AttributeError:
        return
    for info in monitors:
        process = info.process
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
