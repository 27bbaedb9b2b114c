"""A command's process tree, watched while it runs: its peak proportional set size (PSS, each shared page
counted once across the tree) with what each process held at that moment, and its start-up and exit.

    python -m experiments.process_tree [simulate.py overrides ...]   # prints them (JSON) for one run

The run is `CELL` (50 clients, 5 rounds, mlp_small, Ray) with the overrides given after it. MB are MiB (2^20 bytes).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
# the cell: 5 rounds of 50 clients training the 4,810-parameter MLP (mlp_small), no masking, no compression
CELL = ["model=mlp_small", "secagg=none", "compression=none", "fl.num_clients=50", "fl.clients_per_round=50",
        "fl.rounds=5", "backend=ray"]


def role(proc: psutil.Process, root: int) -> str:
    """A short name for a process of the tree: what Ray and fedsqueeze call it."""
    if proc.pid == root:
        return "driver (simulate.py)"
    line = " ".join(proc.cmdline())
    for pattern, name in [(r"ray::(RemoteWorker|IDLE)", "worker"), (r"ray::(\w+)", None),
                          (r"/(raylet|gcs_server)\b", None),
                          (r"(dashboard\.py|log_monitor\.py|monitor\.py)", None), (r"plasma_store", "plasma store")]:
        found = re.search(pattern, line)
        if found:
            return name or found.group(1)
    return Path(proc.cmdline()[0]).name if proc.cmdline() else "?"


def watch(args: list[str], interval: float = 0.05) -> dict:
    """Run `python simulate.py <args>` and watch its tree; returns the figures (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, str(ROOT / "simulate.py"), *args, f"results.dir={tmp}"], cwd=tmp,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak = {"total": 0, "by": {}}

        def sample():
            root = psutil.Process(proc.pid)
            while proc.poll() is None:
                total, by = 0, {}
                try:
                    tree = [root] + root.children(recursive=True)
                except psutil.NoSuchProcess:
                    break
                for p in tree:
                    try:
                        pss = p.memory_full_info().pss
                        name = role(p, proc.pid)
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
                    total += pss
                    by.setdefault(name, []).append(pss)
                if total > peak["total"]:
                    peak.update(total=total, by=by)
                time.sleep(interval)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        err = proc.communicate()[1]
        t_exit = time.time()
        watcher.join()
        if proc.returncode != 0:
            raise RuntimeError(f"simulate.py failed: {err[-1500:]}")
        done = json.loads(next(Path(tmp).glob("*/done.json")).read_text())
    return figures(t0, t_exit, done, peak)


def figures(t0: float, t_exit: float, done: dict, peak: dict) -> dict:
    """The run's figures from its start and exit (wall clock), its done.json's round times and the tree's peak
    sample (total bytes, and each role's processes' bytes)."""
    rounds = done["rounds_ended_at"] - done["rounds_started_at"]
    startup, exit_s = done["rounds_started_at"] - t0, t_exit - done["rounds_ended_at"]
    return {"wall_s": t_exit - t0, "startup_s": startup, "rounds_s": rounds, "exit_s": exit_s,
            "startup_exit_per_rounds": (startup + exit_s) / rounds, "peak_tree_pss_mb": peak["total"] / 2**20,
            "processes": sum(len(v) for v in peak["by"].values()),
            "held_mb": {name: [round(p / 2**20) for p in pss] for name, pss in sorted(peak["by"].items())}}


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):  # otherwise handed to simulate.py as an override
        print(__doc__.strip())
        sys.exit(0)
    print(json.dumps(watch([*CELL, *sys.argv[1:]]), indent=1))
