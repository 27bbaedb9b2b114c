"""Accuracy of each shared-index policy under masking, next to unmasked per-client top-k and dense.

    python -m experiments.index_policies            # writes results/index_policies.{csv,md}

Runs (or reuses, when results/runs already holds them) digits, 10 IID clients, 20 rounds, mlp_large,
seeds 0-2, at ratios 0.1 and 0.01, with client and server compression and error feedback on.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import fl

POLICIES = ("sketch", "randk", "prev_topk")


def configs(ratios):
    yield "dense (no masking, no compression)", 1.0, ["secagg=none", "compression=none"]
    for ratio in ratios:
        yield "per-client top-k (no masking)", ratio, ["secagg=none", f"compression.ratio={ratio}"]
        for policy in POLICIES:
            yield f"masked, {policy}", ratio, ["secagg=dh", f"compression.ratio={ratio}",
                                               f"compression.index_policy={policy}"]


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/runs")
    ap.add_argument("--out", default="results/index_policies")
    args = ap.parse_args(argv)
    finals = []
    for label, ratio, overrides in configs(args.ratios):
        for seed in args.seeds:
            rows = fl.run(fl.compose([*overrides, f"seed={seed}", f"backend={args.backend}",
                                      f"results.dir={args.runs_dir}"]))
            finals.append({"setting": label, "ratio": ratio, "seed": seed, "policy_ran": rows["index_policy"].iloc[0],
                           "accuracy": rows["accuracy"].iloc[-1], "bytes_up": rows["bytes_up"].sum(),
                           "bytes_down": rows["bytes_down"].sum()})
    runs = pd.DataFrame(finals)
    dense_up = runs.loc[runs["ratio"] == 1.0, "bytes_up"].mean()
    table = (runs.groupby(["ratio", "setting", "policy_ran"], sort=False)
             .agg(accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"), seeds=("seed", "count"),
                  bytes_up_mb=("bytes_up", lambda b: b.mean() / 1e6), bytes_down_mb=("bytes_down", lambda b: b.mean() / 1e6))
             .reset_index())
    table["upload_vs_dense"] = table["bytes_up_mb"] * 1e6 / dense_up
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out.with_suffix(".csv"), index=False)
    cmd = "python -m experiments.index_policies" + ("" if argv is None else " " + " ".join(argv))
    md = ["# Shared index policies under masking vs. per-client top-k", "",
          f"Regenerate: `{cmd}`", "",
          "digits, 10 IID clients (all per round), 20 rounds, mlp_large (501,270 parameters), lr 0.1, 2 local epochs,",
          "client and server top-k with error feedback; accuracy after the last round, mean ± std over seeds "
          f"{', '.join(map(str, args.seeds))}. Bytes are totals over the run (mean over seeds), counted from serialized messages.",
          "", "| ratio | setting | policy that ran | accuracy | upload MB | upload vs dense | download MB |",
          "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        md.append(f"| {r.ratio:g} | {r.setting} | {r.policy_ran} | {r.accuracy_mean:.3f} ± {r.accuracy_std:.3f} | "
                  f"{r.bytes_up_mb:.2f} | {r.upload_vs_dense:.3f}x | {r.bytes_down_mb:.2f} |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return table


if __name__ == "__main__":
    main()
