"""Which runs' models stopped looking at their input, and from which round, read from the rows alone (no saved
model): a round collapsed where its model gave one class to at least 99% of the test images, its logits varying
by less than 0.01 across them (`top_class_share`, `logit_std`; fl.scores.collapsed, the rule a run's end warns
by). Such a model's features died, and its accuracy is chance however ordinary its updates look.

    python -m experiments.health <run dirs or results dirs> [--out results/...]

One line per setting: how many of its runs collapsed at some round, how many ended so, how many ended diverged
instead (non-finite logits, or a finite loss no lower than a uniform guess's, ln 10, from logits that vary: the
rule of the run's other warning), and the others' mean accuracy; then one per run (the first and last rounds
that collapsed, how many did, whether the final one did, its final figures; its least logit spread over the
rounds with finite ones). Runs not finished, and rows written before the columns existed, are said and skipped.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from experiments.activations import runs_in
from experiments.args import summary
from experiments.outputs import check_target, command_line, table_file, write_table
from experiments.report import CODEC, MASKING_ONLY, config_settings, plain_value
from fl.data import NUM_CLASSES
from fl.results import finished, read_rows
from fl.scores import collapsed


def collapsed_rows(rows: pd.DataFrame) -> pd.Series:
    """Per evaluated row, whether its model collapsed (rows not evaluated, blank, are left out)."""
    rows = rows[rows["top_class_share"].notna()]
    return collapsed(rows["top_class_share"], rows["logit_std"])


LEADING = ("dataset.partition", "compression.name", "compression.ratio", "secagg.name")  # every label starts so
# a partition's own keys: the others' runs do not read them
PARTITION_KEYS = {"dataset.alpha": "dirichlet", "dataset.shards_per_client": "shards",
                  "dataset.labels_per_client": "labels"}


def settings(runs: list[Path]) -> dict[Path, str]:
    """Each run's setting: its partition, codec and ratio and mask protocol, then the other config keys (among
    those that can change results, as experiments.report compares them) whose values differ: a key of the codec
    or the masking where it differs between runs of one codec and protocol (one the codec decides, top-k's index
    policy, is not repeated on dense runs), any other where it differs between any runs; less the keys the run
    does not read (another partition's, masking's in an unmasked run). The seed is a column of its own."""
    configs = {run: {k: plain_value(v) for k, v in config_settings(run / "config.json").items()} for run in runs}
    groups: dict[tuple, list[dict]] = {}
    for cfg in configs.values():
        groups.setdefault((cfg.get("compression.name"), cfg.get("secagg.name")), []).append(cfg)
    everywhere = {k for c in configs.values() for k in c if not k.startswith(CODEC) and k not in LEADING
                  and len({c.get(k) for c in configs.values()}) > 1}  # the learning rate, the data, the model
    differ = {codec: sorted(everywhere | {k for c in group for k in c if k.startswith(CODEC) and k not in LEADING
                                          and len({c.get(k) for c in group}) > 1})
              for codec, group in groups.items()}
    labels = {}
    for run, cfg in configs.items():
        partition, masked = cfg.get("dataset.partition"), cfg.get("secagg.name") != "none"
        keys = differ[(cfg.get("compression.name"), cfg.get("secagg.name"))]
        lead = (f"{partition}, {cfg.get('compression.name')} {float(cfg.get('compression.ratio', 1)):g}, "
                f"secagg={cfg.get('secagg.name')}")
        rest = [f"{k}={cfg[k]}" for k in keys if k in cfg and PARTITION_KEYS.get(k, partition) == partition
                and (masked or not k.startswith(MASKING_ONLY))]
        labels[run] = ", ".join([lead, *rest])
    return labels


def readable(run: Path) -> pd.DataFrame | None:
    """The run's rows, or None (said) where it is not finished, has no config.json, or its rows have no
    `top_class_share` (written before it existed)."""
    if not finished(run):
        print(f"health: skipping {run}: not finished (running, or killed: rerun its command)", file=sys.stderr)
        return None
    if not (run / "config.json").exists():  # its setting is unknown: never pooled by guess
        print(f"health: skipping {run}: no config.json", file=sys.stderr)
        return None
    rows = read_rows(run / "rounds.csv")
    if "top_class_share" not in rows or rows["top_class_share"].isna().all():
        print(f"health: skipping {run}: its rows have no top_class_share (written before 2026-12-07)", file=sys.stderr)
        return None
    return rows


def describe(run: Path, rows: pd.DataFrame, setting: str) -> dict:
    """The run's line."""
    cfg = json.loads((run / "config.json").read_text())
    down = collapsed_rows(rows)
    rounds = rows.loc[down.index, "round"]
    last = rows[rows["accuracy"].notna()].iloc[-1]
    return {"run": run.name, "setting": setting, "seed": int(cfg["seed"]), "rounds": len(rows),
            "first_collapsed": int(rounds[down].iloc[0]) if down.any() else None,
            "last_collapsed": int(rounds[down].iloc[-1]) if down.any() else None,
            "rounds_collapsed": int(down.sum()), "ended_collapsed": bool(down.iloc[-1]),
            "ended_non_finite": bool(pd.isna(last["logit_std"])),
            # sure of wrong classes: a finite loss no lower than the uniform guess's, from logits that vary
            "ended_guessing": bool(not down.iloc[-1] and math.log(NUM_CLASSES[cfg["dataset"]["name"]])
                                   <= last["loss"] < math.inf),
            "accuracy": float(last["accuracy"]), "loss": float(last["loss"]), "logit_std": float(last["logit_std"]),
            "top_class_share": float(last["top_class_share"]),
            "min_logit_std": float(rows["logit_std"].min())}  # over the rounds whose logits were finite


def by_setting(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting: runs, runs that collapsed at some round, and how the runs ended that failed: collapsed (dead
    features), with non-finite logits, or with a finite loss no better than guessing (both diverged); and the mean
    final accuracy of the others."""
    out = []
    for setting, runs in table.groupby("setting", sort=True):
        failed = runs["ended_collapsed"] | runs["ended_non_finite"] | runs["ended_guessing"]
        out.append({"setting": setting, "runs": len(runs), "ever_collapsed": int(runs["first_collapsed"].notna().sum()),
                    "ended_collapsed": int(runs["ended_collapsed"].sum()),
                    "ended_non_finite": int(runs["ended_non_finite"].sum()),
                    "ended_guessing": int(runs["ended_guessing"].sum()),
                    "accuracy_others": float(runs.loc[~failed, "accuracy"].mean()) if (~failed).any() else None})
    return pd.DataFrame(out)


def _figure(value, fmt: str) -> str:
    return "" if value is None or pd.isna(value) else format(value, fmt)


def _spread(value: float) -> str:
    """A logit spread: four decimals (a dead model's is 0.0000), a diverged model's huge one in three digits."""
    return format(value, ".4f" if abs(value) < 1e3 else ".3g")


def markdown(table: pd.DataFrame, settings: pd.DataFrame) -> str:
    lines = ["| setting | runs | collapsed at some round | ended collapsed | ended non-finite | ended no better than "
             "guessing | accuracy of the others |", "|---" * 7 + "|"]
    for r in settings.itertuples():
        lines.append(f"| {r.setting} | {r.runs} | {r.ever_collapsed} | {r.ended_collapsed} | {r.ended_non_finite} "
                     f"| {r.ended_guessing} | {_figure(r.accuracy_others, '.3f')} |")
    lines += ["", "| run | setting | seed | rounds | first collapsed | last collapsed | rounds collapsed "
              "| ended collapsed | accuracy | loss | logit std | top class | least logit std |", "|---" * 13 + "|"]
    for r in table.itertuples():
        lines.append(f"| {r.run} | {r.setting} | {r.seed} | {r.rounds} | {_figure(r.first_collapsed, '.0f')} "
                     f"| {_figure(r.last_collapsed, '.0f')} | {r.rounds_collapsed} "
                     f"| {'yes' if r.ended_collapsed else 'no'} | {r.accuracy:.3f} | {r.loss:.4g} "
                     f"| {_spread(r.logit_std)} | {r.top_class_share:.2f} | {_spread(r.min_logit_std)} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("runs", nargs="+", type=Path, help="run folders, or folders of runs")
    ap.add_argument("--out", default=None, help="also write <out>.md and <out>.csv")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    command = command_line("experiments.health", argv)
    if args.out:
        check_target(table_file(args.out, ".md"), command, args.force)
    rows = {run: r for run in runs_in(args.runs, needs=None) if (r := readable(run)) is not None}
    lines = [describe(run, rows[run], setting) for run, setting in settings(list(rows)).items()]
    if not lines:
        raise SystemExit("no run named has rows with top_class_share")
    table = pd.DataFrame(lines).sort_values(["setting", "seed", "run"], kind="stable", ignore_index=True)
    table[["first_collapsed", "last_collapsed"]] = table[["first_collapsed", "last_collapsed"]].astype("Int64")
    md = markdown(table, by_setting(table))
    print(md)
    if args.out:
        write_table(args.out, "Runs whose model stopped looking at its input", command, summary(__doc__), table, md)
    return table


if __name__ == "__main__":
    main()
