"""Run a small grid of settings x seeds through fl.run (reusing finished runs) and tabulate final results."""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

import fl
from experiments import hosts
from experiments.outputs import table_file, together
from fl.config import validate
from fl.errors import ConfigError, RunInProgress


def run_grid(settings, seeds, backend: str = "inline", runs_dir: str = "results/runs") -> pd.DataFrame:
    """settings: (label, overrides) pairs. One line per run: label, seed, what ran, final accuracy, bytes. Every
    cell's configuration is checked before any runs: one refused after others had run lost their time."""
    cells = []
    for label, overrides in settings:
        for seed in seeds:
            cfg = fl.compose([*overrides, f"seed={seed}", f"backend={backend}"])
            cfg.results.dir = str(runs_dir)  # set, not an override: a folder's name may hold '=' or ','
            try:
                validate(cfg)
            except ConfigError as err:
                raise SystemExit(f"{label} (seed {seed}): configuration refused: {err}") from None
            cells.append((label, seed, cfg))
    out = []
    for label, seed, cfg in cells:
        rows = run_when_free(cfg)
        out.append({"setting": label, "seed": seed, "partition": rows["partition"].iloc[0],
                    "host": hosts.of(rows), "compression": rows["compression"].iloc[0],
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


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over seeds per setting; accuracy and upload relative to the dense run (no compression, no
    masking) on the same partition: a shards row against IID dense would count the partition's cost as the
    method's. `hosts`: the CPUs a setting's runs were made on (seconds compare only within one)."""
    table = (runs.groupby(["setting", "partition", "compression", "ratio", "secagg", "policy_ran"], sort=False,
                          dropna=False)  # a run with a blank key (rows from before a column) is still a line
             .agg(accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"), seeds=("seed", "count"),
                  bytes_up_mb=("bytes_up", lambda b: b.mean() / 1e6),
                  bytes_down_mb=("bytes_down", lambda b: b.mean() / 1e6),
                  s_per_round=("s_per_round", "mean"),
                  hosts=("host", hosts.pooled)).reset_index())
    dense = table.loc[(table["compression"] == "none") & (table["secagg"] == "none")]
    if dense["partition"].duplicated().any() or not set(table["partition"]) <= set(dense["partition"]):
        raise ValueError(f"need one dense setting per partition, got {dense[['setting', 'partition']].values.tolist()} "
                         f"for partitions {sorted(set(table['partition']))}")
    base = dense.set_index("partition")
    table["upload_vs_dense"] = table["bytes_up_mb"] / table["partition"].map(base["bytes_up_mb"])
    table["accuracy_vs_dense"] = table["accuracy_mean"] - table["partition"].map(base["accuracy_mean"])
    return table


def accuracy_cell(mean: float, std: float, runs: int) -> str:
    """'mean ± std' over runs; one run has no spread to show (not ± 0)."""
    return f"{mean:.3f}" if runs < 2 or pd.isna(std) else f"{mean:.3f} ± {std:.3f}"


def write(table: pd.DataFrame, out: str, title: str, command: str, description: str, notes=()) -> str:
    """table -> <out>.csv and <out>.md (with the command that regenerates it, and `notes`, lines after the
    table); returns the Markdown."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", f"Regenerate: `{command}`", "", description, "",
             "| setting | codec | ratio | secagg | positions | seeds | accuracy | Δ vs dense | upload MB "
             "| upload vs dense | download MB | s / round | host |", "|---" * 13 + "|"]
    tag = hosts.letters(table["hosts"])
    for r in table.itertuples():
        lines.append(f"| {r.setting} | {r.compression} | {r.ratio:g} | {r.secagg} | {r.policy_ran} | {r.seeds} "
                     f"| {accuracy_cell(r.accuracy_mean, r.accuracy_std, r.seeds)} "
                     f"| {r.accuracy_vs_dense:+.3f} | {r.bytes_up_mb:.2f} | {r.upload_vs_dense:.3f}x "
                     f"| {r.bytes_down_mb:.2f} | {r.s_per_round:.2f} | {hosts.lettered(r.hosts, tag)} |")
    legend = ["", "Hosts (the CPU each setting's runs were made on; seconds per round compare only between rows of "
              "one host): " + hosts.legend(tag) + "."]
    md = "\n".join([*lines, *legend, *notes]) + "\n"
    with together(table_file(path, ".csv"), table_file(path, ".md")) as (csv, markdown):
        table.to_csv(csv, index=False)
        markdown.write_text(md)
    return md
