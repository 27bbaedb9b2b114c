"""Rerun committed result cells on the current code and compare them with their committed rows.

    python -m experiments.reproduce results/topk_digits/a845f9284c81 [more run dirs] [--rounds 3]
        [--backend inline|ray] [--workers N]

A run directory holds the cell's config.json and rounds.csv. `--rounds R` reruns only the first R rounds
(a round's result does not depend on how many follow, except that the last is always evaluated) and
compares those. Exits non-zero if accuracy, loss or any byte count differs.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

import fl

COMPARED = ("accuracy", "loss", "bytes_up", "bytes_up_payload", "bytes_up_protocol", "bytes_up_sketch",
            "bytes_down", "catchups", "rejected", "aborted", "dropped")


def rerun(run_dir: Path, rounds: int | None, backend: str, workers: int | None, out: Path) -> pd.DataFrame:
    cfg = OmegaConf.create(json.loads((run_dir / "config.json").read_text()))
    cfg.results.dir, cfg.backend, cfg.ray.num_workers = str(out), backend, workers
    if rounds is not None:
        cfg.fl.rounds = min(rounds, cfg.fl.rounds)
    return fl.run(cfg)


def compare(committed: pd.DataFrame, fresh: pd.DataFrame) -> list[str]:
    """The columns (and rounds) where the fresh rows differ; the last fresh round is always evaluated, so
    where the committed run did not evaluate it, its accuracy is not compared."""
    head = committed[committed["round"] < len(fresh)].reset_index(drop=True)
    diffs = []
    for col in COMPARED:
        if col not in head or col not in fresh:
            continue
        a, b = head[col], fresh[col].reset_index(drop=True)
        both = a.notna() & b.notna()
        bad = [int(r) for r in head.loc[both & (a != b), "round"]]
        if bad:
            diffs.append(f"{col} differs in rounds {bad[:5]}: {a[both & (a != b)].iloc[0]} vs {b[both & (a != b)].iloc[0]}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--backend", default="inline", choices=("inline", "ray"))
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for run_dir in args.runs:
            fresh = rerun(run_dir, args.rounds, args.backend, args.workers, Path(tmp))
            diffs = compare(pd.read_csv(run_dir / "rounds.csv"), fresh)
            print(f"{run_dir}: {'identical' if not diffs else 'DIFFERS'} over {len(fresh)} rounds "
                  f"({args.backend}, workers {args.workers or 'default'})")
            for d in diffs:
                print("   ", d)
            failed += bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
