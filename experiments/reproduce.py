"""Rerun committed result cells on the current code and compare them with their committed rows.

    python -m experiments.reproduce results/topk_digits/050dfe155f91 [more run dirs] [--rounds 3]
        [--backend inline|ray] [--workers N]

A run directory holds the cell's config.json and rounds.csv. `--rounds R` reruns only the first R rounds
(a round's result does not depend on how many follow, except that the last is always evaluated) and
compares those. Exits non-zero if accuracy, loss, the logits' spread and top class share, any byte count, the count
of catch-ups, rejected or dropped clients, the local steps trained (each where the rows have them), or whether the
round aborted differs (`COMPARED`).
Rows agree bit for bit only on the CPU that recorded them (its `env_cpu`): another CPU's vector kernels round float
sums differently, which moves accuracy and loss, and through the chosen positions a top-k message's bytes; a
difference on another CPU is named so.

One rule changed how bytes are counted since results were first committed: rows recorded before commit
8000978 charged a client's dense catch-up at round 0's broadcast length rather than the catch-up message's
own (2-3 bytes short, or about 11 over with an index set sent as a seed). Their `bytes_down` is compared within
16 bytes per catch-up of the round, and the difference is printed; every other column exactly.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

import fl
from experiments import hosts
from fl.results import read_rows

EVALUATED = ("accuracy", "loss", "logit_std", "top_class_share")  # blank on a round not evaluated
COMPARED = (*EVALUATED, "bytes_up", "bytes_up_payload", "bytes_up_protocol", "bytes_up_sketch",
            "bytes_down", "catchups", "rejected", "aborted", "dropped", "local_steps")


def rerun(run_dir: Path, rounds: int | None, backend: str, workers: int | None, out: Path) -> pd.DataFrame:
    cfg = OmegaConf.create(json.loads((run_dir / "config.json").read_text()))
    cfg.results.dir, cfg.backend, cfg.ray.num_workers = str(out), backend, workers
    if rounds is not None:
        cfg.fl.rounds = min(rounds, cfg.fl.rounds)
    return fl.run(cfg)


CATCHUP_COUNTED = "8000978b6fe98b7fd8c5b7d02d1cc5deb6baf715"  # from here on a catch-up is charged its own length
CATCHUP_SLACK = 16  # bytes per catch-up: round 0's broadcast and the catch-up message differ by less
REPO = Path(__file__).resolve().parent.parent  # the commits are looked up here, wherever the command is run from


def counted_catchups_as_round_0(code) -> bool:
    """Whether rows of this `code` column (a commit, `+modified`, or blank before commits were recorded) come
    from code that charged a catch-up at round 0's broadcast length."""
    commit = str(code).split("+")[0] if isinstance(code, str) else ""
    if not commit:
        return True
    ancestor = subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", commit, f"{CATCHUP_COUNTED}^"],
                              capture_output=True)
    return ancestor.returncode == 0


def compare(committed: pd.DataFrame, fresh: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the columns and rounds where the fresh rows differ, notes on differences the counting rules explain);
    the last fresh round is always evaluated, so where the committed run did not evaluate it, its accuracy and
    loss are not compared; any other value blank on one side only differs (a rerun that stopped evaluating a round
    is no match). Rows of a run that never finished (killed: fewer rows than the rerun) are compared round by round
    as far as they go, and a note says so."""
    head = committed[committed["round"] < len(fresh)].reset_index(drop=True)
    last = len(fresh) - 1
    diffs, notes = [], []
    if len(head) < len(fresh):
        notes.append(f"the recorded rows stop after {len(head)} of the {len(fresh)} rounds rerun (a run that did not "
                     "finish): only those are compared")
        fresh = fresh[fresh["round"].isin(head["round"])]
    older = counted_catchups_as_round_0(head["code"].iloc[0] if "code" in head else "")
    for col in COMPARED:
        if col not in head or col not in fresh:
            continue
        a, b = head[col], fresh[col].reset_index(drop=True)
        differ = (a != b) & ~(a.isna() & b.isna())
        if col in EVALUATED:
            differ &= ~(a.isna() & (head["round"] == last))
        if col == "bytes_down" and older and differ.any():
            # rows kept before catch-ups were counted have no count to explain a difference by: compared exactly
            catchups = head["catchups"] if "catchups" in head else 0
            explained = differ & ((a - b).abs() <= CATCHUP_SLACK * catchups)
            if explained.any():
                notes.append(f"bytes_down differs by {int((b - a)[explained].sum())} bytes over "
                             f"{int(head.loc[explained, 'catchups'].sum())} catch-ups (rows before "
                             f"{CATCHUP_COUNTED[:7]} charged them at round 0's broadcast length)")
            differ &= ~explained
        bad = [int(r) for r in head.loc[differ, "round"]]
        if bad:
            diffs.append(f"{col} differs in rounds {bad[:5]}: {a[differ].iloc[0]} vs {b[differ].iloc[0]}")
    recorded, here = hosts.of(committed), hosts.of(fresh)
    if diffs and recorded != here:
        notes.append(f"recorded on {recorded}, rerun on {here}: float results need not match across CPUs; "
                     "compare on the recording CPU")
    return diffs, notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--backend", default="inline", choices=("inline", "ray"))
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    if args.rounds is not None and args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.workers is not None and args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    for run_dir in args.runs:
        if not (run_dir / "rounds.csv").is_file() or not (run_dir / "config.json").is_file():
            ap.error(f"{run_dir} is not a run's folder (no rounds.csv and config.json): name <results.dir>/<hash>")
        if read_rows(run_dir / "rounds.csv").empty:
            ap.error(f"{run_dir}/rounds.csv holds no rows (its run ended before its first round): nothing to compare")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for run_dir in args.runs:
            committed = read_rows(run_dir / "rounds.csv")
            # rows of a run that did not finish: rerun no more rounds than they hold
            rounds = min(args.rounds or len(committed), len(committed))
            fresh = rerun(run_dir, rounds, args.backend, args.workers, Path(tmp))
            diffs, notes = compare(committed, fresh)
            planned = json.loads((run_dir / "config.json").read_text())["fl"]["rounds"]
            if len(committed) < planned:
                notes.append(f"the recorded run did not finish: {len(committed)} of its {planned} rounds are recorded")
            print(f"{run_dir}: {'identical' if not diffs else 'DIFFERS'} over {len(fresh)} rounds "
                  f"({args.backend}, workers {args.workers or 'default'})")
            for d in diffs + notes:
                print("   ", d)
            failed += bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
