"""Sweeps: one preset swept inline, with Ray (one Ray and one warm pool for all its cells) and on a two-node
Ray cluster (`ray.cluster_utils.Cluster`: two raylets on this machine), every cell checked against inline.

    python -m experiments.bench_sweep                  # the quick preset's 20 cells; prints the table
    python -m experiments.bench_sweep --check          # an 8-cell sweep on the cluster vs inline (the test's)

Each sweep is one `python simulate.py -m ...` process, timed from its start to its exit (wall_s: the median of
3 repeats, inline and Ray alternating; walls_s lists them; the cluster sweeps once). first_cell_s =
the first cell's start to its first round (Ray's and the pool's start where it has one); per_cell_overhead_s =
the median over the later cells of a cell's wall (its start to the next cell's start) minus its rounds: what a
warm cell costs beyond its rounds (not defined for a cluster's cells, which overlap). experiments.bench_sim puts
these rows in results/bench_sim.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from experiments.args import positive_int, summary
from experiments.reproduce import COMPARED
from fl.results import read_rows

ROOT = Path(__file__).resolve().parent.parent
# what a cell computes (timings, ids and peak memory vary between any two runs of it)
COMPUTED = ["config_hash", "round", *COMPARED]
MODES = ("inline", "ray", "cluster")  # inline first: the reference
QUICK = ["+experiment=quick"]  # 20 cells of mlp_small, 5 rounds each
# 8 cells, 6 distinct: at ratio 1 error feedback changes nothing (the same config hash), so those repeats run once
CHECK = ["model=mlp_small", "fl.rounds=2", "fl.num_clients=12", "fl.clients_per_round=6", "secagg=none,dh",
         "compression.ratio=1.0,0.1", "compression.error_feedback=true,false"]


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus: int = 2):
    """`nodes` raylets on this machine (the first one the head), each declaring `cpus` CPUs; yields the
    address to join. This process does not connect to it."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": cpus, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=cpus)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def sweep(overrides: list[str], results: Path) -> dict:
    """Run `python simulate.py -m <overrides>` with rows under `results`; its wall and what it printed."""
    t0 = time.time()
    done = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", *overrides, f"results.dir={results}"],
                          capture_output=True, text=True, timeout=1800, cwd=results.parent)
    wall = time.time() - t0
    if done.returncode != 0:
        raise RuntimeError(f"sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"wall_s": wall, "started": t0, "output": done.stdout + done.stderr}


def cells(results: Path) -> dict[str, pd.DataFrame]:
    return {d.name: read_rows(d / "rounds.csv") for d in sorted(results.iterdir()) if (d / "done.json").exists()}


def equal_cells(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> int:
    """How many cells of `a` have the same computed rows in `b`."""
    same = 0
    for chash, rows in a.items():
        other = b.get(chash)
        if other is not None and rows[COMPUTED].reset_index(drop=True).equals(other[COMPUTED].reset_index(drop=True)):
            same += 1
    return same


def timeline(results: Path) -> tuple[float, float]:
    """(first_cell_s, per_cell_overhead_s) of a sweep whose cells ran one after another: the first cell's
    start-up (its start to its first round), and the median over the later cells of each cell's wall (its
    start to the next cell's start) minus its rounds. Cells that overlap (a cluster's) give (nan, nan)."""
    done = sorted(((json.loads((d / "done.json").read_text()), read_rows(d / "rounds.csv")["t_round"].sum())
                   for d in results.iterdir() if (d / "done.json").exists()), key=lambda x: x[0]["started_at"])
    starts = [x["started_at"] for x, _ in done]
    first = done[0][0]["rounds_started_at"] - starts[0]
    gaps = [starts[i + 1] - starts[i] - done[i][1] for i in range(1, len(done) - 1)]
    if any(done[i][0]["rounds_ended_at"] > starts[i + 1] for i in range(len(done) - 1)):
        return float("nan"), float("nan")
    return first, float(pd.Series(gaps).median()) if gaps else float("nan")


def measure(overrides: list[str], modes: list[str], tmp: Path, repeats: int = 1) -> list[dict]:
    """Sweep `overrides` in each mode (inline, ray, cluster) and compare every cell with inline. With
    `repeats` > 1 the inline and Ray sweeps alternate that many times (a shared machine's slow spells then
    fall on both) and each row reports the medians, with every repeat's wall; the cluster sweeps once."""
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    reference = None
    for rep in range(repeats):
        for mode in modes:
            if mode == "cluster" and rep > 0:
                continue
            results = tmp / f"{mode}-{rep}"
            results.mkdir(parents=True)
            extra = {"inline": ["backend=inline"], "ray": ["backend=ray"]}.get(mode)
            with (local_cluster() if mode == "cluster" else contextlib.nullcontext()) as address:
                if mode == "cluster":
                    extra = ["backend=ray", "ray.num_workers=1", "hydra/launcher=ray_cells",
                             f"hydra.launcher.address={address}"]
                run = sweep([*overrides, *extra], results)
            rows = cells(results)
            reference = reference if reference is not None else rows
            nodes = sorted(set(re.findall(r"on node ([0-9a-f]{8,})", run["output"])))
            first, overhead = timeline(results)
            runs[mode].append({"cells": len(rows), "equal_to_inline": equal_cells(reference, rows),
                               "wall_s": run["wall_s"], "first_cell_s": first, "per_cell_overhead_s": overhead,
                               "nodes": len(nodes) if mode == "cluster" else 1,
                               "failed": [f"{f.parent.name}: {f.read_text().strip()}"[:500]
                                          for f in sorted(results.glob("*/failed-*.txt"))]})
            print(mode, runs[mode][-1], flush=True)
    out = []
    for mode, done in runs.items():
        frame = pd.DataFrame(done)
        out.append({"sweep": mode, "cells": int(frame.cells.min()), "equal_to_inline": int(frame.equal_to_inline.min()),
                    "wall_s": float(frame.wall_s.median()), "first_cell_s": float(frame.first_cell_s.median()),
                    "per_cell_overhead_s": float(frame.per_cell_overhead_s.median()), "nodes": int(frame.nodes.max()),
                    "walls_s": " ".join(f"{w:.1f}" for w in frame.wall_s),
                    "failed": "; ".join(sum(frame.failed, []))})  # what a cell that raised said (fl.results)
    inline = out[0]["wall_s"]
    for row in out:
        row["vs_inline"] = row["wall_s"] / inline
    return out


def sweep_modes(text: str) -> list[str]:
    """--modes: known modes, each once, inline among them; put first, since `measure` compares every cell and
    wall with the first mode's (without inline, the first mode would be reported equal to itself, at 1.00x)."""
    given = text.split(",")
    if not given or set(given) - set(MODES) or len(set(given)) < len(given) or "inline" not in given:
        raise argparse.ArgumentTypeError(f"{text!r}: expected distinct modes of {', '.join(MODES)}, inline among them")
    return [mode for mode in MODES if mode in given]


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--check", action="store_true", help="the test's 8-cell sweep, inline and on the cluster")
    ap.add_argument("--modes", type=sweep_modes, default="inline,ray,cluster")
    ap.add_argument("--repeats", type=positive_int, default=3, help="inline and Ray sweeps, alternating")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.check:
            rows = measure(CHECK, ["inline", "cluster"], Path(tmp))
        else:
            rows = measure(QUICK, args.modes, Path(tmp), args.repeats)
    table = pd.DataFrame(rows)
    print(table.to_markdown(index=False, floatfmt=".2f"))
    print("JSON " + json.dumps(rows))
    return table


if __name__ == "__main__":
    main()
