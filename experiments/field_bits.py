"""The accuracy cost of the masked field's width: secagg.quant_bits (and with it the field, b = quant_bits +
ceil(log2 clients_per_round)) for masked top-k with the default `fresh` policy, beside no masking.

    python -m experiments.field_bits            # writes results/field_bits.{csv,md}
    python -m experiments.field_bits --ratios 0.01 --widths 16 --summary-bits 8 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --out results/field_bits_10seeds        # the default width at 0.01, with an 8-bit summary beside it
    python -m experiments.field_bits --ratios 0.01 0.015 0.02 --widths 16 --against 0.01 \
        --seeds 0 1 2 3 4 5 6 7 8 9 --out results/masked_budget   # masked k against per-client top-k at 0.01

digits, 10 IID clients, 20 rounds, mlp_large, ratio 0.01 and 0.1, seeds 0-2, runs in results/runs.
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from experiments.args import each_once, sparse_ratio, summary
from experiments.grid import run_grid, summarize, write
from experiments.outputs import check_target, command_line, table_file

DENSE = "dense (no masking, no compression)"


def settings(ratios, widths, summary_bits=(), against=None):
    """Dense, per-client top-k and masked top-k at each field width; `summary_bits`: the same masked settings
    again with the first exchange's summary (the `marginals` cells) quantized to that many bits instead of
    quant_bits (compression.sketch_quant_bits); `against`, where `ratios` lacks it: per-client top-k only there."""
    yield DENSE, ["secagg=none", "compression=none"]
    if against is not None and against not in ratios:  # the reference the masked lines are compared with
        yield "per-client top-k (no masking)", ["secagg=none", f"compression.ratio={against}"]
    for ratio in ratios:
        yield "per-client top-k (no masking)", ["secagg=none", f"compression.ratio={ratio}"]
        for q in widths:
            masked = ["secagg=dh", f"compression.ratio={ratio}", f"secagg.quant_bits={q}"]
            yield f"masked, quant_bits {q} (field {q + 4} bits)", masked
            for bits in summary_bits:
                if bits != q:
                    yield (f"masked, quant_bits {q} (field {q + 4} bits), summary {bits} bits",
                           [*masked, f"compression.sketch_quant_bits={bits}"])


def paired_gaps(runs: pd.DataFrame, against: float | None = None) -> list[str]:
    """Each masked setting against per-client top-k, seed by seed (the same data and cohorts): the mean of the
    differences and its standard error, the figure the masked goals are stated in. The per-client runs are
    those at the masked setting's own ratio, or at `against` (what masking costs to match them)."""
    lines = []
    compressed = runs[runs.compression != "none"]
    per_client = compressed[compressed.secagg == "none"]
    for ratio, at_ratio in compressed.groupby("ratio", sort=False):
        reference = ratio if against is None else against
        base = per_client[per_client.ratio == reference].set_index("seed").accuracy
        for label, masked in at_ratio[at_ratio.secagg != "none"].groupby("setting", sort=False):
            d = (masked.set_index("seed").accuracy - base).dropna()
            which = "" if reference == ratio else f" at ratio {reference:g}"
            if len(d) < 2:  # no spread to state
                lines.append(f"- ratio {ratio:g}, {label}: {100 * d.mean():+.2f} points against per-client "
                             f"top-k{which} ({len(d)} seed)")
                continue
            error = d.std(ddof=1) / np.sqrt(len(d))
            lines.append(f"- ratio {ratio:g}, {label}: {100 * d.mean():+.2f} ± {100 * error:.2f} points against "
                         f"per-client top-k{which} ({len(d)} seeds, mean ± standard error of the per-seed "
                         f"differences)")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--ratios", type=sparse_ratio, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--widths", type=int, nargs="+", default=[8, 12, 16, 24])
    ap.add_argument("--summary-bits", type=int, nargs="*", default=[],
                    help="also run each masked width with its summary quantized to these bits")
    ap.add_argument("--against", type=sparse_ratio, default=None,
                    help="compare every masked setting with per-client top-k at this ratio (default: its own)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/runs")
    ap.add_argument("--out", default="results/field_bits")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    for option in ("seeds", "ratios", "widths", "summary_bits"):  # one setting twice: its runs counted twice
        each_once(ap, "--" + option.replace("_", "-"), getattr(args, option) or ())
    command = command_line("experiments.field_bits", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    runs = run_grid(settings(args.ratios, args.widths, args.summary_bits, args.against), args.seeds, args.backend,
                    args.runs_dir)
    table = summarize(runs)
    md = write(table, args.out, "Masked top-k against the width of its field",
               command,
               "digits, 10 IID clients (all per round), 20 rounds, mlp_large (501,270 parameters), client and "
               "server top-k with error feedback, index policy `fresh`; final accuracy, mean ± std over seeds "
               f"{', '.join(map(str, args.seeds))}; bytes are run totals (mean over seeds) counted from the serialized "
               "messages. "
               "Every masked value is quant_bits signed bits; the field adds ceil(log2 10) = 4 so that the sum of "
               "10 clients cannot wrap; the masked upload per element is (quant_bits + 4) / 8 bytes. The first "
               "exchange's summary (each weight matrix's row and column energies) is quantized to quant_bits too, "
               "unless the setting names its own summary bits.",
               ["", "Masked against per-client top-k, seed by seed:", "", *paired_gaps(runs, args.against)])
    print(md)
    return table


if __name__ == "__main__":
    main()
