"""Masked top-k with the `fresh` index set on Fashion-MNIST against its first exchange's summary: blocks of
several sizes (finer blocks find more of the update's mass and cost more upload) beside the default marginals.

    python -m experiments.block_sizes          # writes results/block_sizes_fmnist.{csv,md}

The Fashion-MNIST table's setting (+experiment=fmnist_table: lenet, 100 clients / 10 a round, 1 local epoch,
30 rounds), IID and 2-class shards, ratio 0.01, seeds 0-1, runs in results/fmnist/block_runs.
"""
from __future__ import annotations

import argparse

from experiments.args import each_once, sparse_ratio, summary
from experiments.grid import run_grid, summarize, write
from experiments.outputs import check_target, command_line, table_file

DENSE = "dense (no masking, no compression)"
# (entries per block, bits of each summary cell; null: secagg.quant_bits, 16), error feedback
BLOCKS = [(64, None, True), (32, 12, True), (16, 8, True), (8, 8, True), (16, 4, True), (64, None, False),
          (16, 8, False)]


def settings(partitions, ratio):
    for partition in partitions:
        base = ["+experiment=fmnist_table", f"dataset.partition={partition}"]
        yield f"{partition}: {DENSE}", [*base, "secagg=none", "compression=none"]
        yield f"{partition}: per-client top-k (no masking)", [*base, "secagg=none", f"compression.ratio={ratio}"]
        yield f"{partition}: masked, marginals (the default), 16-bit summary", [*base, "secagg=dh",
                                                                                 f"compression.ratio={ratio}"]
        for block, bits, feedback in BLOCKS:
            label = f"{partition}: masked, blocks of {block}, {bits or 16}-bit summary" + \
                ("" if feedback else ", no EF")
            yield label, [*base, "secagg=dh", f"compression.ratio={ratio}", "compression.fresh_summary=blocks",
                          f"compression.block_size={block}",
                          *([f"compression.sketch_quant_bits={bits}"] if bits else []),
                          f"compression.error_feedback={str(feedback).lower()}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--partitions", nargs="+", default=["iid", "shards"])
    ap.add_argument("--ratio", type=sparse_ratio, default=0.01)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/fmnist/block_runs")
    ap.add_argument("--out", default="results/block_sizes_fmnist")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--seeds", args.seeds or ())
    each_once(ap, "--partitions", args.partitions)  # two dense baselines of one partition: refused after every run
    command = command_line("experiments.block_sizes", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    runs = run_grid(settings(args.partitions, args.ratio), args.seeds, args.backend, args.runs_dir)
    table = summarize(runs)
    print(write(table, args.out,
                "Masked top-k on Fashion-MNIST against its `fresh` summary: blocks of each size, and marginals",
                command,
                "Fashion-MNIST, lenet (107,786 parameters), 100 clients / 10 a round, 1 local epoch, 30 rounds, "
                f"ratio {args.ratio}, client and server top-k, `dh` masking with the `fresh` index set: a first masked "
                "exchange of each client's block energies (sums of squares of its error-corrected update, or of its "
                "update where a line says no EF, per block of consecutive entries, quantized to the stated bits), "
                "the heaviest blocks taken whole as the "
                "round's k positions, or of its marginals (the energies of each weight tensor's rows and columns), "
                "the k entries of largest estimated energy; a second masked exchange of the values there. Final "
                "accuracy, mean ± std over "
                f"seeds {', '.join(map(str, args.seeds))} (the last round of a 2-class-shards run moves by several "
                "points from round to round); bytes are run totals (mean over seeds) counted from the serialized "
                "messages."))
    return table


if __name__ == "__main__":
    main()
