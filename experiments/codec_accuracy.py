"""Accuracy and bytes of every registered codec at one ratio, against dense; the linear codecs (count sketch,
rotation) and top-k also under masking.

    python -m experiments.codec_accuracy                          # results/codec_accuracy.{csv,md} (digits)
    python -m experiments.codec_accuracy --preset fmnist          # results/codec_accuracy_fmnist.{csv,md}
    python -m experiments.codec_accuracy --preset fmnist_shards   # results/codec_accuracy_fmnist_shards.{csv,md}

digits: runs in results/runs (not committed). fmnist, fmnist_shards: the Fashion-MNIST setting at federated scale
(lenet, 100 clients / 10 a round, 50 rounds) on Dirichlet 0.5 and on 2-class shards, runs in
results/fmnist/runs_50_codecs (committed). Finished runs are reused. Each table says its setting in its
description (PRESETS).
"""
from __future__ import annotations

import argparse

import compression
from experiments.args import each_once, sparse_ratio, summary
from experiments.grid import run_grid, summarize, write
from experiments.outputs import check_target, command_line, number_range, table_file

DENSE = "dense"
FMNIST = ["+experiment=fmnist_table", "fl.rounds=50"]
FMNIST_SETTING = ("Fashion-MNIST, lenet (107,786 parameters), 100 clients / 10 a round, {split}, 1 local epoch, 50 "
                  "rounds, seeds {{seeds}}, no masking unless said, each codec on both sides with its own config "
                  "(`conf/compression/<codec>.yaml`: qsgd does not compress the broadcast), error feedback on for "
                  "biased codecs. Dense codecs (fp16, int8, qsgd, rotation) ignore the ratio. Bytes are run totals "
                  "(mean over seeds) counted from the serialized messages; s / round is the median wall time of "
                  "rounds 2 on (one process, one core), mean over seeds.")
PRESETS = {
    "digits": dict(base=[], seeds=[0, 1, 2], runs_dir="results/runs", out="results/codec_accuracy",
                   setting="digits, 10 IID clients, 20 rounds, mlp_large, seeds {seeds}, no masking unless said, "
                           "each codec on both sides\nwith its own config (`conf/compression/<codec>.yaml`: qsgd does "
                           "not compress the broadcast), error\nfeedback on for biased codecs. Dense codecs (fp16, "
                           "int8, qsgd, rotation) ignore the ratio."),
    "fmnist": dict(base=[*FMNIST, "dataset.partition=dirichlet", "dataset.alpha=0.5"], seeds=[0, 1, 2, 3, 4],
                   runs_dir="results/fmnist/runs_50_codecs", out="results/codec_accuracy_fmnist",
                   setting=FMNIST_SETTING.format(split="Dirichlet 0.5")),
    "fmnist_shards": dict(base=[*FMNIST, "dataset.partition=shards"], seeds=[0, 1, 2, 3, 4],
                          runs_dir="results/fmnist/runs_50_codecs", out="results/codec_accuracy_fmnist_shards",
                          setting=FMNIST_SETTING.format(split="2-class shards (McMahan's split: 2 label-sorted "
                                                                  "shards a client)")),
}


def settings(ratio, base=()):
    yield DENSE, [*base, "secagg=none", "compression=none"]
    for name in compression.names():
        if name != "none":
            yield name, [*base, "secagg=none", f"compression={name}", f"compression.ratio={ratio}"]
    yield "topk without error feedback", [*base, "secagg=none", "compression=topk", f"compression.ratio={ratio}",
                                          "compression.error_feedback=false"]
    yield "countsketch under dh masking", [*base, "secagg=dh", "compression=countsketch", f"compression.ratio={ratio}"]
    yield "rotation under dh masking", [*base, "secagg=dh", "compression=rotation"]
    yield "topk under dh masking (fresh index set)", [*base, "secagg=dh", "compression=topk",
                                                      f"compression.ratio={ratio}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--preset", choices=sorted(PRESETS), default="digits")
    ap.add_argument("--ratio", type=sparse_ratio, default=0.01)
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir")
    ap.add_argument("--out")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--seeds", args.seeds or ())
    p = PRESETS[args.preset]
    seeds, out = args.seeds or p["seeds"], args.out or p["out"]
    command = command_line("experiments.codec_accuracy", argv)
    check_target(table_file(out, ".md"), command, args.force)
    table = summarize(run_grid(settings(args.ratio, p["base"]), seeds, args.backend, args.runs_dir or p["runs_dir"]))
    print(write(table, out, f"Every codec at ratio {args.ratio:g} against dense", command,
                p["setting"].format(seeds=number_range(seeds))))
    return table


if __name__ == "__main__":
    main()
