"""Accuracy and bytes of every registered codec at one ratio, against dense; the linear codecs (count sketch,
rotation) and top-k also under masking.

    python -m experiments.codec_accuracy            # writes results/codec_accuracy.{csv,md}

digits, 10 IID clients, 20 rounds, mlp_large, seeds 0-2, no masking unless said, each codec on both sides
with its own config (`conf/compression/<codec>.yaml`: qsgd does not compress the broadcast), error
feedback on for biased codecs. Dense codecs (fp16, int8, qsgd, rotation) ignore the ratio.
"""
from __future__ import annotations

import argparse

import compression
from experiments.args import each_once, ratio, summary
from experiments.grid import run_grid, summarize, write
from experiments.outputs import check_target, command_line, table_file

DENSE = "dense"


def settings(ratio):
    yield DENSE, ["secagg=none", "compression=none"]
    for name in compression.names():
        if name != "none":
            yield name, ["secagg=none", f"compression={name}", f"compression.ratio={ratio}"]
    yield "topk without error feedback", ["secagg=none", "compression=topk", f"compression.ratio={ratio}",
                                          "compression.error_feedback=false"]
    yield "countsketch under dh masking", ["secagg=dh", "compression=countsketch", f"compression.ratio={ratio}"]
    yield "rotation under dh masking", ["secagg=dh", "compression=rotation"]
    yield "topk under dh masking (fresh index set)", ["secagg=dh", "compression=topk", f"compression.ratio={ratio}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--ratio", type=ratio, default=0.01)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/runs")
    ap.add_argument("--out", default="results/codec_accuracy")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--seeds", args.seeds or ())
    command = command_line("experiments.codec_accuracy", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    table = summarize(run_grid(settings(args.ratio), args.seeds, args.backend, args.runs_dir))
    print(write(table, args.out, f"Every codec at ratio {args.ratio:g} against dense",
                command,
                __doc__.split("\n\n", 2)[2].strip()))
    return table


if __name__ == "__main__":
    main()
