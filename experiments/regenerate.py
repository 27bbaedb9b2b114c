"""Rerun the `Regenerate:` command of every committed table that only reads kept rows, and say what ran.

    python -m experiments.regenerate [--root results] [--match TEXT] [--list]

Every table under results/ names the command that made it on its `Regenerate:` line. Those of the scripts that
only read run folders (READS_ROWS) run here one after another, from the current directory (the repository root,
where the commands were written); the others run experiments (benchmarks, codec and field grids: hours of cells)
and are listed, not run. `git status results` afterwards shows what moved: a committed table is true for the code
only if rerunning its command changes nothing. Exits non-zero if a command fails, naming its table.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

from experiments.args import summary

READS_ROWS = ("experiments.report", "experiments.activations", "experiments.health")  # read run folders, write tables
LINE = re.compile(r"^Regenerate: `([^`]*)`", re.MULTILINE)


def commands(root: Path, match: str | None = None) -> list[tuple[Path, str]]:
    """(table, its command) for each table under `root` with a `Regenerate:` line, in path order; with `match`,
    only the commands that contain it."""
    found = []
    for table in sorted(root.rglob("*.md")):
        line = LINE.search(table.read_text(errors="replace"))
        if line and (match is None or match in line.group(1)):
            found.append((table, line.group(1)))
    return found


def module_of(command: str) -> str | None:
    """The module of a `python -m <module> ...` command, else None."""
    words = shlex.split(command)
    return words[2] if len(words) > 2 and words[:2] == ["python", "-m"] else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--root", type=Path, default=Path("results"), help="the folder of committed tables")
    ap.add_argument("--match", default=None, help="only the commands that contain this text")
    ap.add_argument("--list", action="store_true", help="say what would run, run nothing")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        raise SystemExit(f"{args.root} is not a folder (run from the repository root, or name --root)")
    found = commands(args.root, args.match)
    if not found:
        raise SystemExit(f"no table under {args.root} has a `Regenerate:` line"
                         + (f" containing {args.match!r}" if args.match else ""))
    failed = []
    for table, command in found:
        module = module_of(command)
        if module not in READS_ROWS:
            print(f"not run ({module or 'not python -m'} runs experiments): {table}", flush=True)
            continue
        print(f"{'would run' if args.list else 'running'}: {table}: {command}", flush=True)
        if args.list:
            continue
        done = subprocess.run([sys.executable, "-m", module, *shlex.split(command)[3:]], stdout=subprocess.DEVNULL)
        if done.returncode:
            failed.append(f"{table} (exit {done.returncode})")
    if failed:
        print("failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
