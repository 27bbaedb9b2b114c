"""Where a run ran: recorded in every row so results from different environments can be compared."""
from __future__ import annotations

import functools
import os
import platform
from pathlib import Path


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe(device: str, backend: str, workers: int, torch_version: str) -> dict:
    """`torch_version`: the workers' (the driver of a Ray run does not import torch)."""
    return {"env_cpu": cpu_model(), "env_cores": os.cpu_count(), "env_torch": torch_version,
            "device": device, "backend": backend, "num_workers": workers,
            "env": f"{device}, {backend} x{workers}, {os.cpu_count()} cores, torch {torch_version}"}
