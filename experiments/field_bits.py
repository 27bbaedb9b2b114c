"""The accuracy cost of the masked field's width: secagg.quant_bits (and with it the field, b = quant_bits +
ceil(log2 clients_per_round)) for masked top-k with the default `fresh` policy, beside no masking.

    python -m experiments.field_bits            # writes results/field_bits.{csv,md}

digits, 10 IID clients, 20 rounds, mlp_large, ratio 0.01 and 0.1, seeds 0-2, runs in results/runs.
"""
from __future__ import annotations

import argparse

from experiments.grid import run_grid, summarize, write

DENSE = "dense (no masking, no compression)"


def settings(ratios, widths):
    yield DENSE, ["secagg=none", "compression=none"]
    for ratio in ratios:
        yield "per-client top-k (no masking)", ["secagg=none", f"compression.ratio={ratio}"]
        for q in widths:
            yield f"masked, quant_bits {q} (field {q + 4} bits)", ["secagg=dh", f"compression.ratio={ratio}",
                                                                   f"secagg.quant_bits={q}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--widths", type=int, nargs="+", default=[8, 12, 16, 24])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--backend", default="inline")
    ap.add_argument("--runs-dir", default="results/runs")
    ap.add_argument("--out", default="results/field_bits")
    args = ap.parse_args(argv)
    table = summarize(run_grid(settings(args.ratios, args.widths), args.seeds, args.backend, args.runs_dir), DENSE)
    print(write(table, args.out, "Masked top-k against the width of its field",
                "python -m experiments.field_bits" + ("" if argv is None else " " + " ".join(argv)),
                "digits, 10 IID clients (all per round), 20 rounds, mlp_large (501,270 parameters), client and "
                "server top-k with error feedback, index policy `fresh`; final accuracy, mean ± std over seeds "
                f"{', '.join(map(str, args.seeds))}; bytes are run totals counted from the serialized messages. "
                "Every masked value is quant_bits signed bits; the field adds ceil(log2 10) = 4 so that the sum of "
                "10 clients cannot wrap; the masked upload per element is (quant_bits + 4) / 8 bytes."))
    return table


if __name__ == "__main__":
    main()
