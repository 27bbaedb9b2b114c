"""Accuracy of each shared-index policy under masking, next to unmasked per-client top-k, dense and the masked
rotation codec.

    python -m experiments.index_policies                   # results/index_policies.{csv,md} (digits)
    python -m experiments.index_policies --preset fmnist   # results/index_policies_fmnist.{csv,md}

digits: 10 IID clients, 20 rounds, mlp_large, seeds 0-2, ratios 0.1 and 0.01, runs in results/runs.
fmnist: the Fashion-MNIST table's setting (+experiment=fmnist_table: lenet, 100 clients / 10 a round, 30
rounds), IID and 2-class shards, ratio 0.01, seeds 0-1 (the table's), runs in results/fmnist/runs (cells the
table already ran are reused). Client and server compression and error feedback on; finished runs are reused.
"""
from __future__ import annotations

import argparse

from experiments.args import each_once, sparse_ratio, summary
from experiments.grid import run_grid, summarize, write
from experiments.outputs import check_target, command_line, table_file

DENSE = "dense (no masking, no compression)"


POLICIES = {"fresh (marginals)": ["compression.index_policy=fresh"],
            "fresh, blocks of 64": ["compression.index_policy=fresh", "compression.fresh_summary=blocks"],
            "fresh, count-sketch summary": ["compression.index_policy=fresh", "compression.fresh_summary=sketch"],
            "fresh, exact summary (the bound: top k of the sum, a dense first exchange)":
                ["compression.index_policy=fresh", "compression.fresh_summary=exact"],
            "sketch (stale)": ["compression.index_policy=sketch"], "randk": ["compression.index_policy=randk"],
            "prev_topk": ["compression.index_policy=prev_topk"]}
PRESETS = {
    "digits": dict(base=[], partitions=[None], ratios=[0.1, 0.01], seeds=[0, 1, 2], runs_dir="results/runs",
                   out="results/index_policies", setting=(
                       "digits, 10 IID clients (all per round), 20 rounds, mlp_large (501,270 parameters), lr 0.1, 2 "
                       "local epochs")),
    "fmnist": dict(base=["+experiment=fmnist_table"], partitions=["iid", "shards"], ratios=[0.01], seeds=[0, 1],
                   runs_dir="results/fmnist/runs", out="results/index_policies_fmnist", setting=(
                       "Fashion-MNIST, lenet (107,786 parameters), 100 clients / 10 a round, 1 local epoch, 30 "
                       "rounds, IID and 2-class shards")),
}


def settings(ratios, base=(), partitions=(None,)):
    for partition in partitions:
        part = [f"dataset.partition={partition}"] if partition else []
        tag = f"{partition}: " if partition else ""
        yield f"{tag}{DENSE}", [*base, *part, "secagg=none", "compression=none"]
        for ratio in ratios:
            yield f"{tag}per-client top-k (no masking)", [*base, *part, "secagg=none", f"compression.ratio={ratio}"]
            for name, policy in POLICIES.items():
                yield f"{tag}masked, {name}", [*base, *part, "secagg=dh", f"compression.ratio={ratio}", *policy]
        yield f"{tag}masked rotation, 8 bits", [*base, *part, "secagg=dh", "compression=rotation"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--preset", choices=sorted(PRESETS), default="digits")
    ap.add_argument("--ratios", type=sparse_ratio, nargs="+")
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir")
    ap.add_argument("--out")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--seeds", args.seeds or ())
    each_once(ap, "--ratios", args.ratios or ())  # one setting twice: its runs counted twice
    p = PRESETS[args.preset]
    command = command_line("experiments.index_policies", argv)
    check_target(table_file(args.out or p["out"], ".md"), command, args.force)
    ratios, seeds = args.ratios or p["ratios"], args.seeds or p["seeds"]
    runs = run_grid(settings(ratios, p["base"], p["partitions"]), seeds, args.backend, args.runs_dir or p["runs_dir"])
    table = summarize(runs)
    print(write(table, args.out or p["out"], "Shared index policies under masking vs. per-client top-k",
                command,
                f"{p['setting']}, client and server top-k with error feedback; final accuracy, mean ± std over "
                f"seeds {', '.join(map(str, seeds))}; bytes are run totals (mean over seeds) counted from the "
                "serialized messages, accuracy and upload against the dense row of the same partition; s / round is "
                "the median wall time of rounds 2 on (one process, one core), mean over seeds. Masked values travel "
                "in the narrowest field that cannot wrap (secagg.bits: 20 bits for 10 clients of 16-bit values); "
                "`fresh` masks twice a round."))
    return table


if __name__ == "__main__":
    main()
