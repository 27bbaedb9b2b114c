"""Accuracy of each shared-index policy under masking, next to unmasked per-client top-k and dense.

    python -m experiments.index_policies            # writes results/index_policies.{csv,md}

Runs (or reuses, when results/runs already holds them) digits, 10 IID clients, 20 rounds, mlp_large,
seeds 0-2, at ratios 0.1 and 0.01, with client and server compression and error feedback on.
"""
from __future__ import annotations

import argparse

from experiments.grid import run_grid, summarize, write

DENSE = "dense (no masking, no compression)"


def settings(ratios):
    yield DENSE, ["secagg=none", "compression=none"]
    for ratio in ratios:
        yield "per-client top-k (no masking)", ["secagg=none", f"compression.ratio={ratio}"]
        for policy in ("sketch", "randk", "prev_topk"):
            yield f"masked, {policy}", ["secagg=dh", f"compression.ratio={ratio}", f"compression.index_policy={policy}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/runs")
    ap.add_argument("--out", default="results/index_policies")
    args = ap.parse_args(argv)
    table = summarize(run_grid(settings(args.ratios), args.seeds, args.backend, args.runs_dir), DENSE)
    print(write(table, args.out, "Shared index policies under masking vs. per-client top-k",
                "python -m experiments.index_policies" + ("" if argv is None else " " + " ".join(argv)),
                "digits, 10 IID clients (all per round), 20 rounds, mlp_large (501,270 parameters), lr 0.1, 2 local "
                "epochs, client and server top-k with error feedback; final accuracy, mean ± std over seeds "
                f"{', '.join(map(str, args.seeds))}; bytes are run totals (mean over seeds) counted from the "
                "serialized messages."))
    return table


if __name__ == "__main__":
    main()
