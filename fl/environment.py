"""Where a run ran: recorded in every row so results from different environments can be compared."""
from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

# the paths whose changes change what a run computes (results/ and docs/ do not)
CODE_PATHS = ("fl", "compression", "secagg", "conf", "simulate.py", "experiments", "pyproject.toml")
SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".proto", ".toml")  # a new file of these is new code


@functools.lru_cache(maxsize=1)
def cpu_model(info: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's name with its family, model and widest vector unit: a virtual machine may name two CPU generations
    alike ("AMD EPYC"), and their vector kernels round differently, so a rerun on the other one differs."""
    if info.exists():
        fields: dict[str, str] = {}
        for line in info.read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip() and fields:
                break  # the first processor's block is enough
            fields.setdefault(key.strip(), value.strip())
        if "model name" in fields:
            flags = set(fields.get("flags", "").split())
            vector = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("sse4_2", "SSE4.2"))
                           if flag in flags), None)
            detail = [f"family {fields['cpu family']}, model {fields['model']}"] if "cpu family" in fields else []
            detail += [vector] if vector else []
            return fields["model name"] + (f" ({'; '.join(detail)})" if detail else "")
    return platform.processor() or platform.machine()


def code_version(root: Path | None = None) -> str:
    """The commit of the checkout the code runs from (12 hex digits), with `+modified` when the code differs from
    it, so a table can say which code its rows came from; the package version outside a git checkout. Asked at
    every run, never cached: a long session (a notebook) may edit or check out code between two runs, and a Ray
    run's fresh workers import what is on disk then."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root.resolve():
            raise subprocess.SubprocessError("installed inside another project's checkout")
        commit = git("rev-parse", "--short=12", "HEAD")
        # a new source file counts too (a codec added as compression/<name>.py is new code); other new files (an
        # editor's swap file, notes, a run's lock), ignored ones (caches) and anything outside the code's paths do not
        # -z: paths as they are (a name with a space or an accent is quoted otherwise, and ends in '"')
        status = [e for e in git("status", "--porcelain", "-z", "--untracked-files=all", "--", *CODE_PATHS).split("\0")
                  if e]
        changed = [line for line in status if not line.startswith("??") or line.endswith(SOURCE_SUFFIXES)]
        return commit + ("+modified" if changed else "")
    except (OSError, subprocess.SubprocessError):
        from importlib import metadata

        try:
            return "fedsqueeze " + metadata.version("fedsqueeze")
        except metadata.PackageNotFoundError:
            return "unknown"


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The whole cores a cgroup CPU quota allows (`docker --cpus=2.5`: 3), or None without a quota: a container's
    quota throttles the process without narrowing its affinity mask. cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_*`)."""
    try:
        line = (root / "cpu.max").read_text().split() if (root / "cpu.max").exists() else [
            (root / "cpu" / "cpu.cfs_quota_us").read_text().strip(),
            (root / "cpu" / "cpu.cfs_period_us").read_text().strip()]
        quota, period = line[0], line[1]
        if quota == "max" or int(quota) <= 0 or int(period) <= 0:
            return None
        return max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError, IndexError):
        return None


def usable_cpus() -> int:
    """The cores this process may run on: a SLURM job's or a container's share (its affinity mask, and its cgroup
    CPU quota if one is set), not the whole machine's."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no affinity masks
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return cores if quota is None else min(cores, quota)


def describe(device: str, backend: str, workers: int, torch_version: str) -> dict:
    """`torch_version`: the workers' (the driver of a Ray run does not import torch). Cores: those the run may
    use (its CPU affinity), which is what its timings depend on."""
    cores = usable_cpus()
    return {"env_cpu": cpu_model(), "env_cores": cores, "env_torch": torch_version, "code": code_version(),
            "device": device, "backend": backend, "num_workers": workers,
            "env": f"{device}, {backend} x{workers}, {cores} cores, torch {torch_version}"}
