"""Simulation speed and memory: how much of a round is the framework, and does N = 1000 fit.

    python -m experiments.bench_sim            # writes results/bench_sim.{csv,md}
    python -m experiments.bench_sim --quick --out /tmp/bench_sim
        # no N = 1000 cells, no two-node sweep; written apart (the committed table is refused to a --quick run)

Each cell runs in its own process (clean memory figures, a fresh Ray start) on digits (three cells on
Fashion-MNIST, lenet, 100 clients, 10 a round, 201 rounds of seed 0, for evaluation's share of a round: see
`evaluation_share`) with Ray workers
(one per core). round_s is the median wall time of rounds 2..R (R = 5; 3 at N = 1000; 30 in the N = 50
goal cell, so that its medians hold still on a shared machine; that cell runs in three processes and the one
with the median share is reported, share_runs listing all three); train_s the local-training seconds inside
it (summed over clients, divided by the number of workers, which train in parallel); overhead_share =
1 - train_s / round_s is the framework's own share; first_round_s = Ray's start (from just after the
configuration is validated) + round 1;
run_s = the whole fl.run call (Ray start and shutdown included); process_s = the cell's whole process
(Python start, imports, fl.run, exit); peak_mb = the driver's peak RSS plus the largest worker's times the
number of workers (ru_maxrss; the rows keep only the largest worker's, so a bound on the sum);
state_mb_per_client = error-feedback residuals kept between rounds, per client that has one.
Where the framework's share goes (medians over the same rounds): server_s = the driver's broadcast encoding,
decoding, summing and unmasking; evaluate_s = evaluation on the test split (after the round, or a worker's
share of it inside the next round's training call); client_work_s = a worker's
broadcast decoding, encoding and masking (per worker); rest_s = what remains: Ray's calls and replies,
waiting for the slower worker, and the loop's bookkeeping (negative where the server's work overlaps
the workers' training: cells whose replies stream).
command_s = median wall of 9 runs of `python simulate.py` with the goal cell's settings (N = 10, mlp_small, no
masking or compression), start to exit; command_min_s and command_max_s their range. Ray's start alone is
bimodal (longer by up to a second when its raylet misses the driver's first once-a-second poll), hence 9.
evaluate_share = evaluate_s / round_s; evaluate_worker_s = the median, over the evaluations carried by the next
round's training call, of the workers' seconds on one (summed over workers; 0 where none is carried). The two
Fashion-MNIST cells that evaluate every other round (R = 201) are paired round by round with the one evaluated
only at its first and last rounds (`evaluation_share`, rounds 3..R - 1): their round_s is the mean wall of the
rounds that do the evaluation's work, evaluate_s what evaluation adds to such a round, evaluate_share_se the
standard error of evaluate_share, and overhead_share and rest_s are taken against that round_s.
Units: the memory the OS reports (peak_mb, driver_peak_mb, worker_peak_mb, the process tree's PSS) is binary,
MB = MiB (2^20 bytes) and GB = GiB, the goals' bounds too; state_mb_per_client counts 10^6 bytes.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.args import positive_int, summary
from experiments import bench_sweep
from experiments.outputs import check_target, command_line, table_file, together
from experiments.process_tree import CELL as CELL_50  # a single run's start-up, exit and memory
from fl.environment import cpu_model


# The start-up goal's cell: its whole `python simulate.py` command is timed too.
N10_GOAL = {"clients": 10, "model": "mlp_small", "secagg": "none", "compression": "none"}
# Evaluation's share of a real-data round: lenet on Fashion-MNIST, 100 clients, 10 a round, on the 10,000 test
# images (skipped where the data is not installed). Three runs of one seed, so of the same cohorts, each round of
# one paired with the same round of the others: evaluated every other round with the evaluation carried by the
# next round's training (the default), the same with the evaluation after its own round (the baseline,
# `fl.eval_overlap=false`), and evaluated only at the first and last rounds (`evaluation_share` says how they combine).
FMNIST_EVAL = {"clients": 100, "clients_per_round": 10, "model": "lenet", "dataset": "fashion_mnist",
               "secagg": "none", "compression": "none", "rounds": 201, "seed": 0, "extra": "fl.local_epochs=1"}
FMNIST_RUNS = {"carried": " fl.eval_every=2", "after": " fl.eval_every=2 fl.eval_overlap=false",
               "none": " fl.eval_every=1000"}


def evaluation_share(evaluated: list[float], plain: list[float], carried: bool) -> tuple[float, float, float, float]:
    """What evaluation adds to a round, from two runs of the same cohorts: `evaluated` evaluates every other
    round (even rounds; with `carried` the evaluation's work is in the odd round after), `plain` never (but at
    the first and last rounds). Per round d = evaluated - plain; the rounds that do the work minus those that do
    not, mean against mean, so that a machine slowing or speeding up between the runs cancels (the two kinds of
    round alternate) and so does the cohort (the runs pair round by round). Rounds 0, 1 and the last are left out.
    Returns (seconds added, share of an evaluating round, mean evaluating round, the share's standard error): the
    error of the difference of the two means, which a noisy host's round-to-round scatter sets."""
    d = [(r, e - p) for r, (e, p) in enumerate(zip(evaluated, plain)) if 2 <= r < len(evaluated) - 1]
    working = 1 if carried else 0
    busy = np.array([x for r, x in d if r % 2 == working])
    idle = np.array([x for r, x in d if r % 2 != working])
    added = float(busy.mean() - idle.mean())
    with_eval = float(np.mean([evaluated[r] for r, _ in d if r % 2 == working]))
    error = float(np.sqrt(busy.var(ddof=1) / len(busy) + idle.var(ddof=1) / len(idle)))
    return added, added / with_eval, with_eval, error / with_eval


def available_datasets() -> set[str]:
    from fl.data import check_files
    from fl.errors import ConfigError

    out = {"digits"}
    try:
        check_files("fashion_mnist", "data", ["/usr/share/datasets/fashion-mnist"])
        out.add("fashion_mnist")
    except ConfigError:
        pass
    return out


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
    # the goal cell: 30 rounds, so that its medians (rounds 2..30) hold still on a shared machine, in three
    # processes of which the one with the median share is reported (with the other two as its range)
    yield {"clients": 50, "model": "mlp_small", "secagg": "none", "compression": "none", "rounds": 30, "repeats": 3}
    if FMNIST_EVAL["dataset"] in available_datasets():  # real data with partial participation: evaluation's share
        for extra in FMNIST_RUNS.values():
            yield dict(FMNIST_EVAL, extra=FMNIST_EVAL["extra"] + extra, keep_rounds=True)
    if not quick:  # state that scales: 1000 clients' error-feedback residuals of the 501k-parameter MLP
        yield {"clients": 1000, "model": "mlp_large", "secagg": "none", "compression": "topk",
               "extra": "compression.ratio=0.1 compression.residual_dtype=float16"}


def overrides_for(cell: dict, rounds: int, results_dir: str) -> list[str]:
    n = cell["clients"]
    return [f"model={cell['model']}", f"secagg={cell['secagg']}", f"compression={cell['compression']}",
            f"dataset={cell.get('dataset', 'digits')}", f"fl.num_clients={n}",
            f"fl.clients_per_round={cell.get('clients_per_round', n)}", f"fl.rounds={rounds}", "backend=ray",
            f"results.dir={results_dir}", f"seed={cell.get('seed', int(time.time() * 1e6) % 100000)}",
            *cell.get("extra", "").split()]


def command_seconds(cell: dict, rounds: int, reps: int = 9) -> tuple[float, float, float]:
    """Median, least and most wall of `python simulate.py <the cell's settings>`, process start to exit."""
    walls = []
    for _ in range(reps):
        time.sleep(3)  # let the previous run's Ray processes finish exiting: one run at a time, as a user would
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "simulate.py", *overrides_for(cell, rounds, tmp)], check=True,
                           capture_output=True, text=True)
            walls.append(time.perf_counter() - t0)
    walls.sort()
    return walls[len(walls) // 2], walls[0], walls[-1]


def run_cell(cell: dict, rounds: int, results_dir: str) -> dict:
    import fl
    from fl.seeds import cohort

    n = cell["clients"]
    overrides = overrides_for(cell, rounds, results_dir)
    t0 = time.perf_counter()
    rows = fl.run(fl.compose(overrides))
    run_s = time.perf_counter() - t0
    workers = int(rows["num_workers"].iloc[0])  # the run's pool (its CPU affinity's cores), not the machine's cores
    steady = rows.iloc[1:] if len(rows) > 1 else rows
    round_s = float(steady["t_round"].median())
    train_s = float((steady["t_train"] / workers).median())
    seed, per_round = int(rows["seed"].iloc[0]), cell.get("clients_per_round", n)
    sampled = set().union(*(cohort(seed, r, n, per_round) for r in range(len(rows))))
    with_state = len(sampled) if cell["compression"] != "none" else 0  # clients that kept a residual
    def median(*columns, per=1):
        return float(sum(steady[c].fillna(0) for c in columns if c in steady).median() / per)
    server_s = median("t_broadcast", "t_aggregate", "t_unmask", "t_decode")
    # evaluation after the round, plus a worker's share of an evaluation carried by the next round's training
    carried = rows["t_evaluate_carried"].fillna(0) if "t_evaluate_carried" in rows else 0 * rows["t_evaluate"]
    evaluate_s = float((steady["t_evaluate"] + carried.iloc[1:] / workers).median())
    client_work_s = median("t_sync", "t_encode", "t_mask", per=workers)
    return dict(cell, rounds=rounds, round_s=round_s, train_s=train_s, overhead_share=1 - train_s / round_s,
                server_s=server_s, evaluate_s=evaluate_s, evaluate_share=evaluate_s / round_s,
                evaluate_worker_s=float(carried[carried > 0].median()) if (carried > 0).any() else 0.0,
                **({"round_times": " ".join(f"{t:.4f}" for t in rows["t_round"])} if cell.get("keep_rounds") else {}),
                client_work_s=client_work_s,
                rest_s=round_s - train_s - server_s - evaluate_s - client_work_s,
                first_round_s=float(rows["t_setup"].iloc[0] + rows["t_round"].iloc[0]), run_s=run_s,
                driver_peak_mb=float(rows["driver_peak_mb"].max()), worker_peak_mb=float(rows["worker_peak_mb"].max()),
                peak_mb=float(rows["driver_peak_mb"].max() + workers * rows["worker_peak_mb"].max()),
                state_mb_per_client=float(rows["state_bytes"].iloc[-1]) / 1e6 / with_state if with_state else 0.0,
                accuracy=float(rows["accuracy"].iloc[-1]), n_params=int(rows["n_params"].iloc[0]))


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=positive_int, default=5)
    ap.add_argument("--timeout", type=positive_int, default=1200, help="seconds per cell before it is skipped")
    ap.add_argument("--out", default="results/bench_sim")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    if args.cell:  # child process: one cell, result as JSON on the last line
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_cell(json.loads(args.cell), args.rounds, tmp)), flush=True)
        gc.freeze()  # as simulate.py does: no final collection of the process's objects at exit
        return None
    command = command_line("experiments.bench_sim", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    out_rows = []
    started, load = time.perf_counter(), os.getloadavg()
    for cell in cells(args.quick):
        rounds = cell.pop("rounds", args.rounds if cell["clients"] < 1000 else 3)
        repeats = cell.pop("repeats", 1)
        cmd = [sys.executable, "-m", "experiments.bench_sim", "--cell", json.dumps(cell), "--rounds", str(rounds)]
        try:
            runs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                process_s = time.perf_counter() - t0
                if done.returncode != 0:
                    raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
                runs.append(dict(json.loads(done.stdout.strip().splitlines()[-1]), process_s=process_s))
            runs.sort(key=lambda run: run["overhead_share"])
            row = runs[len(runs) // 2]  # the run with the median share (the only one, unless repeated)
            if repeats > 1:
                row["share_runs"] = " ".join(f"{run['overhead_share']:.3f}" for run in runs)
            if all(cell.get(key) == value for key, value in N10_GOAL.items()):
                row["command_s"], row["command_min_s"], row["command_max_s"] = command_seconds(cell, rounds)
        except (subprocess.TimeoutExpired, RuntimeError, subprocess.CalledProcessError) as err:
            row = dict(cell, skipped=f"{type(err).__name__}: {err}"[:200])
        print(row, flush=True)
        out_rows.append(row)
    table = pd.DataFrame(out_rows)
    fmnist_shares(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    single, sweeps = single_run(), sweep_rows(args.quick)
    cpu = cpu_model()
    md = ["# Simulation speed and memory", "", f"Regenerate: `{command}` ({time.perf_counter() - started:.0f} s here)",
          "", f"Machine: {os.cpu_count()} cores, {cpu}; Ray workers, one per core; digits. Load average "
          f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: other jobs share this machine, so "
          "expect about ±20% between runs.", "",
          __doc__.split("\n\n", 2)[2].strip(), "", *goals(table), *sweep_goals(single, sweeps), "",
          table.drop(columns=["round_times", "keep_rounds"], errors="ignore").to_markdown(index=False, floatfmt=".3f"),
          "", *single_run_lines(single), "",
          *sweep_lines(sweeps, args.quick)]
    with together(table_file(out, ".csv"), table_file(out, "_sweeps.csv"), table_file(out, ".md")) as files:
        table.to_csv(files[0], index=False)  # written last, with the rest: a run stopped mid-way replaces nothing
        sweeps.to_csv(files[1], index=False)
        files[2].write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return table


def fmnist_shares(table: pd.DataFrame) -> None:
    """The Fashion-MNIST cells' evaluate_s and evaluate_share: what evaluation adds to a round, paired with
    the unevaluated run (`evaluation_share`), in place of the per-cell median."""
    if "round_times" not in table:
        return
    rows = {name: table.index[(table.get("dataset") == "fashion_mnist") & (table.extra == FMNIST_EVAL["extra"] + x)]
            for name, x in FMNIST_RUNS.items()}
    if not all(len(index) == 1 for index in rows.values()):
        return
    plain = [float(t) for t in table.at[rows["none"][0], "round_times"].split()]
    for name, carried in (("carried", True), ("after", False)):
        i = rows[name][0]
        added, share, with_eval, error = evaluation_share([float(t) for t in table.at[i, "round_times"].split()],
                                                          plain, carried)
        table.loc[i, ["evaluate_s", "evaluate_share", "round_s", "evaluate_share_se"]] = [added, share, with_eval,
                                                                                          error]
        # the row's other parts of a round, against the round it now shows (they were taken against the median)
        r = table.loc[i]
        table.loc[i, "overhead_share"] = 1 - r.train_s / with_eval
        table.loc[i, "rest_s"] = with_eval - r.train_s - r.server_s - added - r.client_work_s


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def single_run(reps: int = 3) -> dict:
    """experiments.process_tree's cell (`python simulate.py`, 50 clients, 5 rounds), the run with the median wall."""
    from experiments.process_tree import watch

    runs = []
    for _ in range(reps):
        time.sleep(3)  # the previous run's Ray processes finish exiting
        runs.append(watch(CELL_50))
    runs.sort(key=lambda run: run["wall_s"])
    return dict(runs[len(runs) // 2], peak_runs=[round(run["peak_tree_pss_mb"]) for run in runs])


def sweep_rows(quick: bool) -> pd.DataFrame:
    """The quick preset swept inline, with Ray and (not with --quick) on a two-node local cluster."""
    with tempfile.TemporaryDirectory() as tmp:
        modes = ["inline", "ray"] if quick else ["inline", "ray", "cluster"]
        return pd.DataFrame(bench_sweep.measure(bench_sweep.QUICK, modes, Path(tmp), repeats=3))


def single_run_lines(single: dict) -> list[str]:
    held = ", ".join(f"{name} {' + '.join(str(mb) for mb in mbs)}" for name, mbs in
                     sorted(single["held_mb"].items(), key=lambda kv: -sum(kv[1])))
    return ["## A single run: start-up, exit and memory", "",
            f"`python simulate.py {' '.join(CELL_50)}` (experiments/process_tree.py, the median wall of 3 runs): "
            f"{single['wall_s']:.1f} s from start to exit, of which {single['startup_s']:.1f} s before the first "
            f"round (Python, Hydra, Ray's start, the workers' start with torch, the data), {single['rounds_s']:.2f} s "
            f"of rounds and {single['exit_s']:.2f} s from the last round to exit: start-up and exit are "
            f"{single['startup_exit_per_rounds']:.0f} times the rounds' time.", "",
            f"Peak proportional set size of the process tree: {single['peak_tree_pss_mb']:.0f} MB over "
            f"{single['processes']} processes (runs: {', '.join(str(p) for p in single['peak_runs'])} MB); "
            f"MB held at that moment: {held}."]


def sweep_lines(sweeps: pd.DataFrame, quick: bool) -> list[str]:
    return ["## Sweeps", "",
            "`python -m experiments.bench_sweep` (here inside bench_sim): `python simulate.py -m +experiment=quick` "
            "(20 cells of mlp_small, 5 rounds) with `backend=inline`, with `backend=ray` (one Ray and one warm pool "
            "for all cells)" + ("" if quick else ", and with `hydra/launcher=ray_cells` on a two-node "
            "`ray.cluster_utils.Cluster` of 2 CPUs a node (cells of one driver and one worker, one per node at a "
            "time)") + "; every cell's rows compared with inline's. "
            + bench_sweep.__doc__.split("\n\n")[2].replace("\n", " ").strip(), "",
            sweeps.to_markdown(index=False, floatfmt=".2f")]


def sweep_goals(single: dict, sweeps: pd.DataFrame) -> list[str]:
    by = sweeps.set_index("sweep")
    lines = []
    if "ray" in by.index:
        ray = by.loc["ray"]
        lines.append(f"| quick preset swept with `backend=ray` <= 1.3x `backend=inline` | {ray.vs_inline:.2f}x "
                     f"(medians of 3: {ray.wall_s:.1f} s vs {by.loc['inline'].wall_s:.1f} s; walls {ray.walls_s} s vs "
                     f"{by.loc['inline'].walls_s} s; {int(ray.equal_to_inline)} of "
                     f"{int(ray.cells)} cells equal) | {verdict(ray.vs_inline <= 1.3)} |")
        lines.append(f"| per-cell overhead of a warm sweep <= 0.5 s | {ray.per_cell_overhead_s:.2f} s (first cell "
                     f"{ray.first_cell_s:.1f} s to its first round) | {verdict(ray.per_cell_overhead_s <= 0.5)} |")
    if "cluster" in by.index:
        c = by.loc["cluster"]
        lines.append(f"| 20 cells on a two-node local cluster, every cell equal to inline | "
                     f"{int(c.equal_to_inline)} of {int(c.cells)} equal, on {int(c.nodes)} nodes, {c.wall_s:.1f} s | "
                     f"{verdict(c.cells == 20 and c.equal_to_inline == c.cells and c.nodes == 2)} |")
    pss = single["peak_tree_pss_mb"]  # MiB
    lines.append(f"| peak tree PSS of the 50-client cell < 1.2 GB | {pss:.0f} MB ({pss * 2**20 / 1e9:.2f} x 10^9 "
                 f"bytes) | {verdict(pss < 1.2 * 1024)} |")
    return lines


def goals(table: pd.DataFrame) -> list[str]:
    """The issue's goals against this run's figures."""
    def pick(**where):
        rows = table
        for key, value in where.items():
            rows = rows[rows[key] == value]
        return rows.iloc[0] if len(rows) else None

    lines = ["## Goals", "", "| goal | measured | |", "|---|---|---|"]
    n50 = pick(clients=50, model="mlp_small", secagg="none", compression="none")
    if n50 is not None and "round_s" in n50 and pd.notna(n50.round_s):
        lines.append(f"| N = 50, small MLP, no secagg: steady round <= 0.06 s | {n50.round_s:.3f} s | "
                     f"{verdict(n50.round_s <= 0.06)} |")
        runs = n50.get("share_runs")
        spread = (f", the median of {len(runs.split())} runs: {', '.join(f'{float(x):.1%}' for x in runs.split())}"
                  if isinstance(runs, str) else "")
        lines.append(f"| ... framework's share of the round <= 25% | {n50.overhead_share:.1%}{spread} (training "
                     f"{n50.train_s * 1e3:.1f} ms of {n50.round_s * 1e3:.1f} ms; around it Ray's calls and waiting "
                     f"{n50.rest_s * 1e3:.1f} ms, the server {n50.server_s * 1e3:.1f} ms, evaluation "
                     f"{n50.evaluate_s * 1e3:.1f} ms, a worker's encoding {n50.client_work_s * 1e3:.1f} ms) | "
                     f"{verdict(n50.overhead_share <= 0.25)} |")
    big = table[(table.clients == 1000) & table.get("peak_mb", pd.Series(dtype=float)).notna()] \
        if "peak_mb" in table else table.iloc[0:0]
    if len(big):
        worst = big.loc[big.peak_mb.idxmax()]
        lines.append(f"| N = 1000 completes rounds, peak memory < 4 GB | {len(big)} cells completed; largest peak "
                     f"{worst.peak_mb / 1024:.2f} GB ({worst.model}, {worst.secagg}, {worst.compression}) | "
                     f"{verdict(big.peak_mb.max() < 4096)} |")
    fm = {name: pick(dataset="fashion_mnist", extra=FMNIST_EVAL["extra"] + extra)
          for name, extra in FMNIST_RUNS.items()} if "round_times" in table else {}
    if fm and all(row is not None and isinstance(row.get("round_times"), str) for row in fm.values()):
        c, a = fm["carried"], fm["after"]  # evaluate_s, evaluate_share(_se), round_s: fmnist_shares
        lines.append(f"| Fashion-MNIST, lenet, 100 clients / 10 a round: evaluation <= 15% of a round | "
                     f"{c.evaluate_share:.1%} ± {c.evaluate_share_se:.1%}: evaluation adds {c.evaluate_s:.3f} s to a "
                     f"{c.round_s:.3f} s round "
                     f"(three runs of one seed, {int(fm['none'].rounds)} rounds, paired round by round; the workers "
                     f"evaluate for {c.evaluate_worker_s:.2f} s, mostly while the other worker still trains). "
                     f"Evaluated after each round instead (the baseline, `fl.eval_overlap=false`): "
                     f"{a.evaluate_share:.1%} ± {a.evaluate_share_se:.1%}, {a.evaluate_s:.3f} s of "
                     f"{a.round_s:.3f} s (± a standard error over rounds) | "
                     f"{verdict(c.evaluate_share <= 0.15)} |")
    n10 = pick(**N10_GOAL)
    if n10 is not None and "command_s" in n10 and pd.notna(n10.command_s):
        lines.append(f"| N = 10, {int(n10.rounds)} rounds, Ray start included: <= 8 s wall | "
                     "`python simulate.py` start to exit "
                     f"{n10.command_s:.1f} s (median of 9, {n10.command_min_s:.1f}-{n10.command_max_s:.1f} s; "
                     f"fl.run alone {n10.run_s:.1f} s in one cold process of its own, not one of the 9, of which "
                     f"Ray start and worker start-up {n10.first_round_s:.1f} s to the end of round 1) | "
                     f"{verdict(n10.command_s <= 8)} |")
    return lines


if __name__ == "__main__":
    main()
