"""Simulation speed and memory: how much of a round is the framework, and does N = 1000 fit.

    python -m experiments.bench_sim            # writes results/bench_sim.{csv,md}
    python -m experiments.bench_sim --quick    # N = 10 and 100 only

Each cell runs in its own process (clean memory figures, a fresh Ray start) on digits with Ray workers
(one per core). round_s is the median wall time of rounds 2..R; train_s the local-training seconds inside
it (summed over clients, divided by the number of workers, which train in parallel); overhead_share =
1 - train_s / round_s is the framework's own share; first_round_s = pool start (Ray included) + round 1;
run_s = the whole fl.run call; peak_mb = the driver's peak RSS plus each worker's (ru_maxrss);
state_mb_per_client = error-feedback residuals kept between rounds, per client that has one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from fl.environment import cpu_model


def cells(quick: bool):
    sizes = (10, 100) if quick else (10, 100, 1000)
    for n in sizes:
        # full-graph dh costs O(n) per client (about 0.2 s each at n = 1000: minutes per round), so the
        # thousand-client cells mask with secaggplus (O(log n) per client)
        for secagg in ("none", "dh" if n < 1000 else "secaggplus"):
            for comp in ("none", "topk"):
                yield {"clients": n, "model": "mlp_small", "secagg": secagg, "compression": comp}
    for secagg in ("none", "dh"):
        for comp in ("none", "topk"):
            yield {"clients": 100, "model": "mlp_large", "secagg": secagg, "compression": comp}
    yield {"clients": 50, "model": "mlp_small", "secagg": "none", "compression": "none"}
    if not quick:  # state that scales: 1000 clients' error-feedback residuals of the 501k-parameter MLP
        yield {"clients": 1000, "model": "mlp_large", "secagg": "none", "compression": "topk",
               "extra": "compression.ratio=0.1 compression.residual_dtype=float16"}


def run_cell(cell: dict, rounds: int, results_dir: str) -> dict:
    import fl

    n = cell["clients"]
    overrides = [f"model={cell['model']}", f"secagg={cell['secagg']}", f"compression={cell['compression']}",
                 f"fl.num_clients={n}", f"fl.clients_per_round={n}", f"fl.rounds={rounds}", "backend=ray",
                 f"results.dir={results_dir}", f"seed={int(time.time() * 1e6) % 100000}",  # never a cached run
                 *cell.get("extra", "").split()]
    t0 = time.perf_counter()
    rows = fl.run(fl.compose(overrides))
    run_s = time.perf_counter() - t0
    workers = max(1, min(os.cpu_count() or 1, n))
    steady = rows.iloc[1:] if len(rows) > 1 else rows
    round_s = float(steady["t_round"].median())
    train_s = float((steady["t_train"] / workers).median())
    with_state = n if cell["compression"] != "none" else 0
    return dict(cell, rounds=rounds, round_s=round_s, train_s=train_s, overhead_share=1 - train_s / round_s,
                first_round_s=float(rows["t_setup"].iloc[0] + rows["t_round"].iloc[0]), run_s=run_s,
                driver_peak_mb=float(rows["driver_peak_mb"].max()), worker_peak_mb=float(rows["worker_peak_mb"].max()),
                peak_mb=float(rows["driver_peak_mb"].max() + workers * rows["worker_peak_mb"].max()),
                state_mb_per_client=float(rows["state_bytes"].iloc[-1]) / 1e6 / with_state if with_state else 0.0,
                accuracy=float(rows["accuracy"].iloc[-1]), n_params=int(rows["n_params"].iloc[0]))


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell before it is skipped")
    ap.add_argument("--out", default="results/bench_sim")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:  # child process: one cell, result as JSON on the last line
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_cell(json.loads(args.cell), args.rounds, tmp)))
        return None
    out_rows = []
    for cell in cells(args.quick):
        rounds = args.rounds if cell["clients"] < 1000 else 3
        cmd = [sys.executable, "-m", "experiments.bench_sim", "--cell", json.dumps(cell), "--rounds", str(rounds)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
            row = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, RuntimeError) as err:
            row = dict(cell, skipped=f"{type(err).__name__}: {err}"[:200])
        print(row, flush=True)
        out_rows.append(row)
    table = pd.DataFrame(out_rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out.with_suffix(".csv"), index=False)
    cpu = cpu_model()
    md = ["# Simulation speed and memory", "", f"Regenerate: `python -m experiments.bench_sim{' --quick' if args.quick else ''}`",
          "", f"Machine: {os.cpu_count()} cores, {cpu}; Ray workers, one per core; digits.", "",
          __doc__.split("\n\n", 2)[2].strip(), "",
          table.to_markdown(index=False, floatfmt=".3f")]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return table


if __name__ == "__main__":
    main()
