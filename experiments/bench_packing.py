"""Seconds and memory of bit-packing a masked vector in its narrow field (secagg.bits: 12 bits for 8-bit values and
up to 16 clients, 20 for the default 16-bit values, 31 the widest packed), the codes `pack_codes` writes and
`unpack_codes` reads, against the bit-matrix path (np.unpackbits / np.packbits) it keeps for few codes. Both run
here, one after the other, on the same codes: compare their ratio, not absolute seconds.

    python -m experiments.bench_packing            # lengths 1e5, 1e6, 1e7; results/bench_packing.{md,csv}
"""
from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from compression import packing
from experiments.args import each_once, positive_int, summary
from experiments.codec_bench import machine
from experiments.outputs import check_target, command_line, table_file, together

WIDTHS = (12, 20, 31)
LENGTHS = (10**5, 10**6, 10**7)
CROSSOVER = (1000, 2000, 4096, 8192, 16384)  # around packing._WIDE, where pack_codes leaves the bit matrix
PATHS = {"bit matrix": (packing._pack_matrix, packing._unpack_matrix),
         "pack_codes": (packing.pack_codes, lambda data, n, w: packing.unpack_codes(data, n, w, "bench")),
         "groups": (packing._pack_wide, packing._unpack_wide)}


def timed(fn, reps: int) -> float:
    """Median seconds of `reps` calls."""
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


def peak_bytes(fn) -> int:
    """The most memory numpy and Python held at once during one call, beyond what was held before it."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(width: int, n: int, reps: int, paths=("bit matrix", "pack_codes"), section="lengths") -> list[dict]:
    codes = np.random.default_rng(width).integers(0, 1 << width, n, dtype=np.uint64).astype(np.uint32)
    rows = []
    for path in paths:
        pack, unpack = PATHS[path]
        data = np.frombuffer(pack(codes, width), np.uint8)
        if not np.array_equal(unpack(data, n, width), codes):
            raise AssertionError(f"{path}: {width}-bit codes do not read back")
        for stage, call in (("pack", lambda: pack(codes, width)), ("unpack", lambda: unpack(data, n, width))):
            rows.append({"section": section, "width": width, "length": n, "path": path, "stage": stage,
                         "seconds": timed(call, reps), "peak_bytes_per_code": peak_bytes(call) / n,
                         "bytes": int(data.size)})
    return rows


def write_report(df: pd.DataFrame, md: Path, command: str, wall: float, load: tuple[float, float]) -> None:
    main, crossover = df[df.section == "lengths"], df[df.section == "crossover"]
    wide = main.pivot_table(index=["width", "length"], columns=["stage", "path"], values="seconds")
    memory = main.pivot_table(index=["width", "length"], columns=["stage", "path"], values="peak_bytes_per_code")
    lines = [
        "# Bit packing of the masked vector",
        "",
        f"Regenerate: `{command}` ({wall:.0f} s here)",
        "",
        f"Machine: {machine()}; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end. Seconds are",
        "medians over repetitions; both paths ran in this one run on the same codes, so their ratio is the figure",
        "(absolute seconds move with the host and its load). Memory: the peak numpy and Python held during one",
        "call, per code (tracemalloc). `pack_codes` is what the wire uses; `bit matrix` is its path for fewer than",
        f"{packing._WIDE:,} codes, which every count of 9-31-bit codes took before e3d2eee.",
        "",
        "| width | length | pack s, bit matrix | pack s, pack_codes | pack speed-up | unpack s, bit matrix | "
        "unpack s, pack_codes | unpack speed-up | pack B/code, bit matrix | pack B/code, pack_codes | "
        "unpack B/code, bit matrix | unpack B/code, pack_codes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (width, n), row in wide.iterrows():
        mem = memory.loc[(width, n)]
        old_p, new_p = row[("pack", "bit matrix")], row[("pack", "pack_codes")]
        old_u, new_u = row[("unpack", "bit matrix")], row[("unpack", "pack_codes")]
        lines.append(f"| {width} | {n:.0e} | {old_p:.4f} | {new_p:.4f} | {old_p / new_p:.1f}x | {old_u:.4f} | "
                     f"{new_u:.4f} | {old_u / new_u:.1f}x | {mem[('pack', 'bit matrix')]:.1f} | "
                     f"{mem[('pack', 'pack_codes')]:.1f} | {mem[('unpack', 'bit matrix')]:.1f} | "
                     f"{mem[('unpack', 'pack_codes')]:.1f} |")
    if len(crossover):
        ratio = crossover.pivot_table(index=["width", "length"], columns=["stage", "path"], values="seconds")
        lines += ["", f"Where pack_codes leaves the bit matrix (from {packing._WIDE:,} codes): the groups path alone "
                  "against the bit matrix at few codes (seconds of the bit matrix / seconds of the groups; above 1: "
                  "the groups are faster).", "", "| width | length | pack | unpack |", "|---|---|---|---|"]
        for (width, n), row in ratio.iterrows():
            lines.append(f"| {width} | {n:,} | {row[('pack', 'bit matrix')] / row[('pack', 'groups')]:.2f} | "
                         f"{row[('unpack', 'bit matrix')] / row[('unpack', 'groups')]:.2f} |")
    md.write_text("\n".join(lines) + "\n")


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--reps", type=positive_int, default=5, help="repetitions per cell (median)")
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--no-crossover", dest="crossover", action="store_false",
                    help="skip the few-codes comparison of the groups path with the bit matrix")
    ap.add_argument("--out", default="results/bench_packing")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--lengths", args.lengths)
    command = command_line("experiments.bench_packing", argv)
    out = Path(args.out)
    check_target(table_file(out, ".md"), command, args.force)
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    rows = []
    for width in WIDTHS:
        for n in args.lengths:
            rows += measure(width, n, args.reps)
            print(f"{width:2d} bits, {n:.0e}: " + ", ".join(f"{r['path']} {r['stage']} {r['seconds']:.4f} s"
                                                           for r in rows[-4:]), flush=True)
    for n in CROSSOVER if args.crossover else ():
        rows += measure(20, n, 20 * args.reps, paths=("bit matrix", "groups"), section="crossover")
    df = pd.DataFrame(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with together(table_file(out, ".csv"), table_file(out, ".md")) as (csv, md):
        df.to_csv(csv, index=False)
        write_report(df, md, command, time.perf_counter() - start, (load_start, os.getloadavg()[0]))
    print(table_file(out, ".md").read_text())
    return df


if __name__ == "__main__":
    main()
