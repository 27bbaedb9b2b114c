"""Run a small grid of settings x seeds through fl.run (reusing finished runs) and tabulate final results."""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

import fl
from experiments.outputs import together
from fl.errors import RunInProgress


def run_grid(settings, seeds, backend: str = "inline", runs_dir: str = "results/runs") -> pd.DataFrame:
    """settings: (label, overrides) pairs. One line per run: label, seed, what ran, final accuracy, bytes."""
    out = []
    for label, overrides in settings:
        for seed in seeds:
            rows = run_when_free(fl.compose([*overrides, f"seed={seed}", f"backend={backend}",
                                             f"results.dir={runs_dir}"]))
            out.append({"setting": label, "seed": seed, "compression": rows["compression"].iloc[0],
                        "ratio": rows["ratio"].iloc[0], "secagg": rows["secagg"].iloc[0],
                        "policy_ran": rows["index_policy"].iloc[0], "accuracy": rows["accuracy"].iloc[-1],
                        "bytes_up": rows["bytes_up"].sum(), "bytes_down": rows["bytes_down"].sum(),
                        "s_per_round": rows["t_round"].iloc[1:].median() if len(rows) > 1 else rows["t_round"].iloc[0]})
    return pd.DataFrame(out)


def run_when_free(cfg, poll_s: float = 10.0) -> pd.DataFrame:
    """fl.run, waiting while another process runs the same cell into the same folder (two grids that share
    cells, such as a dense baseline): then its rows are read as a finished run's, or, if it died, run here."""
    said = False
    while True:
        try:
            return fl.run(cfg)
        except RunInProgress as err:
            if not said:
                print(f"{err}; waiting for it", flush=True)
                said = True
            time.sleep(poll_s)


def summarize(runs: pd.DataFrame, dense_label: str) -> pd.DataFrame:
    """Mean ± std over seeds per setting, upload relative to the dense setting."""
    table = (runs.groupby(["setting", "compression", "ratio", "secagg", "policy_ran"], sort=False)
             .agg(accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"), seeds=("seed", "count"),
                  bytes_up_mb=("bytes_up", lambda b: b.mean() / 1e6),
                  bytes_down_mb=("bytes_down", lambda b: b.mean() / 1e6),
                  s_per_round=("s_per_round", "mean")).reset_index())
    dense = table.loc[table["setting"] == dense_label].iloc[0]
    table["upload_vs_dense"] = table["bytes_up_mb"] / dense["bytes_up_mb"]
    table["accuracy_vs_dense"] = table["accuracy_mean"] - dense["accuracy_mean"]
    return table


def write(table: pd.DataFrame, out: str, title: str, command: str, description: str, notes=()) -> str:
    """table -> <out>.csv and <out>.md (with the command that regenerates it, and `notes`, lines after the
    table); returns the Markdown."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", f"Regenerate: `{command}`", "", description, "",
             "| setting | codec | ratio | secagg | positions | accuracy | Δ vs dense | upload MB | upload vs dense "
             "| download MB | s / round |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.setting} | {r.compression} | {r.ratio:g} | {r.secagg} | {r.policy_ran} "
                     f"| {r.accuracy_mean:.3f} ± {0 if pd.isna(r.accuracy_std) else r.accuracy_std:.3f} "
                     f"| {r.accuracy_vs_dense:+.3f} | {r.bytes_up_mb:.2f} | {r.upload_vs_dense:.3f}x "
                     f"| {r.bytes_down_mb:.2f} | {r.s_per_round:.2f} |")
    md = "\n".join([*lines, *notes]) + "\n"
    with together(path.with_suffix(".csv"), path.with_suffix(".md")) as (csv, markdown):
        table.to_csv(csv, index=False)
        markdown.write_text(md)
    return md
