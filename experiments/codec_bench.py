"""Codec benchmark: seconds per stage and bytes on the wire, for every registered codec.

    python -m experiments.codec_bench            # writes results/codec_bench.{csv,md}
    python -m experiments.codec_bench --quick --out /tmp/codec_bench
        # fewer repetitions, no model-sized case; written apart (the committed table is refused to a --quick run)

Workloads (float32, seeded standard normal):
  100x(10,1000)             the older framework's: 100 arrays of shape (10, 1000) sent as one update, as
                            it sent them (weights_to_parameters packs all arrays into one Parameters
                            message) and as fedsqueeze sends a model's update: one flat vector of 10^6,
                            one message. Its reported top-k seconds at ratio 0.5 (on its own machine) are
                            `OLDER`; the table sets this run's beside them.
  100x(10,1000) separately  the same arrays, each its own message (100 selections, 100 wire frames):
                            shows the per-message cost
  1x1e7                     one model-sized vector of 10^7 entries, to show how the cost grows
Stages, each summed over the workload's messages:
  compress       codec.encode(array)
  serialize      fl.wire.encode_update(round, client_id, codec, length, weight, payload)
  deserialize    fl.wire.decode_update(message, round, length)
  decompress     compression.get(codec)().decode(payload, length) (decoding reads every parameter from the payload)
  total          the four together (median over repetitions of their sum)
Bytes are len() of the serialized messages, summed. Codecs that ignore the ratio (dense ones) run once.
`floor` rows are plain numpy with no checks, framing or choice of encoding: exact partition
threshold, np.packbits of the mask, flatnonzero + take, and the inverse. `topk` is the codec as
configured by default (threshold bracketed from a sample); `topk[exact]` partitions all magnitudes
(same entries, same payload bytes, different cost); `topk[per-layer]` selects within each (10, 1000)
array as the older framework did. Seconds are medians over repetitions.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

import compression
from compression.positions import ENCODING_NAMES, position_sizes
from fl import wire
from experiments.args import positive_int, summary
from experiments.outputs import check_target, command_line, table_file, together
from fl.environment import cpu_model

RATIOS = (0.5, 0.1, 0.01, 0.001)
STAGES = ("compress", "serialize", "deserialize", "decompress", "total")
# the older framework's top-k (ratio 0.5, one message) as it reported it on its machine: not measured here
OLDER = {"compress": 0.0526, "serialize": 0.664, "deserialize": 0.235, "decompress": 0.0364, "total": 0.907}
ONE = "100x(10,1000)"
SEPARATE = "100x(10,1000) separately"
LARGE = "1x1e7"
LAYER = 10 * 1000


def workloads(quick: bool):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((10, 1000)).astype(np.float32).ravel() for _ in range(100)]
    yield ONE, [np.concatenate(arrays)]
    yield SEPARATE, arrays
    if not quick:
        yield LARGE, [np.random.default_rng(1).standard_normal(10**7).astype(np.float32)]


# --- the plain-numpy floor ----------------------------------------------------------------------

class Floor:
    """Top-k with nothing but the essential numpy calls: the cost a codec cannot go below."""

    name = "floor"

    def __init__(self, ratio):
        self.ratio = ratio

    def encode(self, x):
        n = x.size
        k = min(max(math.ceil(self.ratio * n), 1), n)
        magnitude = np.abs(x)
        mask = magnitude >= np.partition(magnitude, n - k)[n - k]
        return np.packbits(mask, bitorder="little").tobytes() + x.take(np.flatnonzero(mask)).tobytes()

    def decode(self, payload, n):
        size = (n + 7) // 8
        mask = np.unpackbits(np.frombuffer(payload, np.uint8, count=size), count=n, bitorder="little").view(bool)
        out = np.zeros(n, np.float32)
        out[np.flatnonzero(mask)] = np.frombuffer(payload, np.float32, offset=size)
        return out


def variants(workload: str):
    """(label, options, factory(ratio) -> encoder, decoder factory) for every codec and the floor."""
    for name in compression.names():
        cls = compression.get(name)
        yield name, "", cls.uses_ratio, (lambda r, cls=cls: cls(r)), (lambda cls=cls: cls())
    topk = compression.get("topk")
    yield "topk[exact]", "threshold=exact", True, (lambda r: topk(r, threshold="exact")), (lambda: topk())
    if workload == ONE:
        layout = [LAYER] * 100
        yield ("topk[per-layer]", "layout=100x10000", True, (lambda r: topk(r, layout=layout)), (lambda: topk()))
    yield "floor", "plain numpy", True, Floor, (lambda: Floor(1.0))


# --- timing -------------------------------------------------------------------------------------

def run_once(encoder, make_decoder, codec_name, arrays):
    """Seconds per stage for one pass over the workload, and the messages."""
    length = arrays[0].size
    t0 = time.perf_counter()
    payloads = [encoder.encode(x) for x in arrays]
    t1 = time.perf_counter()
    messages = [wire.encode_update(1, i, codec_name, length, 1.0, p) for i, p in enumerate(payloads)]
    t2 = time.perf_counter()
    received = [wire.decode_update(m, 1, length) for m in messages]
    t3 = time.perf_counter()
    decoded = [make_decoder().decode(msg.payload, length) for msg in received]
    t4 = time.perf_counter()
    seconds = {"compress": t1 - t0, "serialize": t2 - t1, "deserialize": t3 - t2, "decompress": t4 - t3}
    seconds["total"] = t4 - t0
    return seconds, payloads, messages, decoded


def measure(label, options, encoder, make_decoder, workload, arrays, ratio, reps):
    codec_name = "floor" if label == "floor" else label.split("[")[0]
    run_once(encoder, make_decoder, codec_name, arrays)  # warm-up: caches (hashes, samples), page faults
    runs = [run_once(encoder, make_decoder, codec_name, arrays) for _ in range(reps)]
    _, payloads, messages, decoded = runs[-1]
    error = max(float(np.abs(d - x).max()) for d, x in zip(decoded, arrays))
    encodings = ""
    if codec_name == "topk":
        encodings = ",".join(sorted({compression.TopKCompression.position_encoding(p) for p in payloads}))
    rows = []
    for stage in STAGES:
        seconds = float(np.median([run[0][stage] for run in runs]))
        fastest = float(np.min([run[0][stage] for run in runs]))
        rows.append(dict(workload=workload, codec=label, options=options, ratio=ratio, stage=stage, seconds=seconds,
                         seconds_min=fastest,
                         seconds_per_message=seconds / len(arrays), bytes=sum(len(m) for m in messages),
                         payload_bytes=sum(len(p) for p in payloads), messages=len(arrays), reps=reps,
                         position_encoding=encodings, max_abs_error=error))
    return rows


def head_to_head(arrays, reps):
    """Top-k and the floor at ratios 0.5 and 0.01, alternated within every repetition, so that load from
    other jobs falls on all of them alike; rows with workload '<workload> interleaved', stage 'total'."""
    topk = compression.get("topk")
    contenders = [(label, ratio, make(ratio), decoder) for ratio in (0.5, 0.01) for label, make, decoder in (
        ("floor", Floor, lambda: Floor(1.0)), ("topk", topk, topk),
        ("topk[exact]", lambda r: topk(r, threshold="exact"), topk))]
    seconds = {(label, ratio): [] for label, ratio, _, _ in contenders}
    for label, ratio, encoder, decoder in contenders:  # warm-up
        run_once(encoder, decoder, label.split("[")[0], arrays)
    for _ in range(reps):
        for label, ratio, encoder, decoder in contenders:
            seconds[(label, ratio)].append(run_once(encoder, decoder, label.split("[")[0], arrays)[0]["total"])
    return [dict(workload=f"{ONE} interleaved", codec=label, options="", ratio=ratio, stage="total",
                 seconds=float(np.median(values)), seconds_min=float(np.min(values)),
                 seconds_per_message=float(np.median(values)) / len(arrays), messages=len(arrays), reps=reps)
            for (label, ratio), values in seconds.items()]


def position_rows(workload, arrays):
    """Top-k position bytes per encoding, against the chosen one and the entropy bound log2 C(n, k) / 8."""
    rows = []
    for ratio in RATIOS:
        codec = compression.TopKCompression(ratio)
        totals = dict.fromkeys(ENCODING_NAMES, 0)
        chosen = entropy = 0.0
        for x in arrays:
            payload = codec.encode(x)
            positions, _ = codec.decode_sparse(payload, x.size)
            for name, size in position_sizes(positions, x.size).items():
                totals[name] += size
            chosen += len(payload) - 10 - 4 * positions.size
            n, k = x.size, positions.size
            entropy += (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2) / 8
        best = min(totals.values())
        rows.append(dict(workload=workload, ratio=ratio, k=codec.k_for(arrays[0].size), chosen_bytes=int(chosen),
                         **{f"{name}_bytes": totals[name] for name in ENCODING_NAMES},
                         chosen_over_best=chosen / best, entropy_bound_bytes=entropy))
    return rows


# --- report -------------------------------------------------------------------------------------

def machine() -> str:
    model = cpu_model()
    blas = os.environ.get("OPENBLAS_CORETYPE")
    return (f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, numpy {np.__version__}"
            + (f", OPENBLAS_CORETYPE={blas}" if blas else ""))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


ORDER = ["floor", "topk", "topk[exact]", "topk[per-layer]", "randk", "ternary", "countsketch", "qsgd", "int8", "fp16",
         "none"]


def stage_table(df: pd.DataFrame, workload: str) -> str:
    """One line per (codec, ratio): milliseconds per stage, against the floor, bytes against dense."""
    cells = {}
    for row in df[df.workload == workload].itertuples():
        cell = cells.setdefault((row.codec, row.ratio), {"row": row})
        cell[row.stage] = row.seconds
        cell[row.stage + "_min"] = row.seconds_min
    dense = next(c["row"].bytes for (codec, _), c in cells.items() if codec == "none")
    floors = {ratio: c["total"] for (codec, ratio), c in cells.items() if codec == "floor"}
    lines = ["| codec | ratio | compress ms | serialize ms | deserialize ms | decompress ms | total ms | vs floor | "
             "fastest total ms | wire bytes | vs dense | positions | max abs error |", "|" + "---|" * 13]
    for (codec, ratio), cell in sorted(cells.items(), key=lambda item: (
            ORDER.index(item[0][0]) if item[0][0] in ORDER else 99, -(item[0][1] or 0))):
        row = cell["row"]
        versus = f"{cell['total'] / floors[ratio]:.2f}x" if ratio in floors else ""
        shown = ratio if ratio != "" else "any"
        lines.append(f"| {codec} | {shown} | {ms(cell['compress'])} | {ms(cell['serialize'])} | "
                     f"{ms(cell['deserialize'])} | {ms(cell['decompress'])} | **{ms(cell['total'])}** | {versus} | "
                     f"{ms(cell['total_min'])} | {int(row.bytes):,} | {row.bytes / dense:.4f} | "
                     f"{row.position_encoding} | {row.max_abs_error:.3g} |")
    return "\n".join(lines)


def write_report(df: pd.DataFrame, positions: pd.DataFrame, md: Path, command: str, wall: float,
                 load: tuple[float, float]) -> None:
    stage = {(r.workload, r.codec, r.ratio, r.stage): r.seconds for r in df.itertuples()}
    total = {key[:3]: seconds for key, seconds in stage.items() if key[3] == "total"}
    fastest = {(r.workload, r.codec, r.ratio): r.seconds_min for r in df.itertuples() if r.stage == "total"}
    both = f"{ONE} interleaved"
    topk05, floor05, exact05 = (total[(both, c, 0.5)] for c in ("topk", "floor", "topk[exact]"))
    topk001, floor001, exact001 = (total[(both, c, 0.01)] for c in ("topk", "floor", "topk[exact]"))
    best05, best001 = fastest[(both, "topk", 0.5)], fastest[(both, "topk", 0.01)]
    separate05, separate001 = (total[(SEPARATE, "topk", r)] for r in (0.5, 0.01))
    worst = positions[positions.workload == ONE]["chosen_over_best"].max()
    worst_separate = positions[positions.workload == SEPARATE]["chosen_over_best"].max()
    goal = lambda ok: "met" if ok else "**missed**"  # noqa: E731
    lines = [
        "# Codec benchmark",
        "",
        f"Regenerate: `{command}` ({wall:.0f} s here)",
        "",
        f"Machine: {machine()}; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (other",
        "jobs share the machine, so expect noise). Seconds are medians over repetitions (the CSV also has",
        "the fastest repetition, `seconds_min`); each stage is summed over the workload's messages.",
        f"`{ONE}` is the older framework's workload sent as it sent it, in one message (one update of",
        f"10^6 floats, global selection); `{SEPARATE}` sends each array as its own message.",
        "`floor` = plain numpy top-k (full partition threshold, packbits, flatnonzero/take) through the same",
        "wire; `topk` = the codec's default (exact threshold bracketed from a sample, then a partition of the",
        "bracket only); `topk[exact]` = threshold from a partition of all magnitudes (same k entries, same",
        "bytes); `topk[per-layer]` = each (10, 1000) array keeps its own top k. Codecs that ignore the ratio",
        "show `any`.",
        "",
        "## Goals",
        "",
        f"Workload `{ONE}`; top-k and the floor measured alternately within each repetition (so that load",
        "from other jobs falls on all alike); round trip = compress + serialize + deserialize + decompress.",
        "",
        "| goal | measured | |",
        "|---|---|---|",
        f"| top-k 0.5, exact k, round trip of the workload <= 10 ms | {ms(topk05)} ms (fastest repetition "
        f"{ms(best05)} ms; threshold='exact' {ms(exact05)} ms; as 100 separate messages {ms(separate05)} ms) | "
        f"{goal(topk05 <= 0.010)} |",
        f"| ... within 1.5x of the floor | {topk05 / floor05:.2f}x ({ms(floor05)} ms floor; threshold='exact' "
        f"{exact05 / floor05:.2f}x) | {goal(topk05 <= 1.5 * floor05)} |",
        f"| top-k 0.01 round trip <= 3 ms | {ms(topk001)} ms ({topk001 / floor001:.2f}x the {ms(floor001)} ms floor; "
        f"fastest repetition {ms(best001)} ms; threshold='exact' {ms(exact001)} ms; as 100 separate messages "
        f"{ms(separate001)} ms) | {goal(topk001 <= 0.003)} |",
        f"| position bytes within 1% of the best encoding, every k | worst chosen/best {worst:.4f} "
        f"({worst_separate:.4f} as separate messages) | {goal(max(worst, worst_separate) <= 1.01)} |",
        "",
        f"## Against the older framework (top-k, ratio 0.5, {ONE} in one message)",
        "",
        "Its seconds are the figures it reported on its own machine (`OLDER`), not measured in this run: the "
        "speed-ups say how far apart the two are, not a same-run ratio (the floor above is one).",
        "",
        "| stage | older framework s (reported, its machine) | fedsqueeze s (this run) | speed-up |",
        "|---|---|---|---|",
    ]
    for name in STAGES:
        ours = stage[(ONE, "topk", 0.5, name)]
        lines.append(f"| {name} | {OLDER[name]:.4f} | {ours:.5f} | {OLDER[name] / ours:.0f}x |")
    lines += ["", f"## {ONE}, one message: every codec", "", stage_table(df, ONE), ""]
    lines += [f"## {SEPARATE}: 100 messages, every codec", "", stage_table(df, SEPARATE), ""]
    if (df.workload == LARGE).any():
        lines += [f"## {LARGE}: one model-sized vector", "", stage_table(df, LARGE), ""]
    lines += ["## Top-k position encodings (bytes of the position block, summed over the workload)", "",
              "| workload | ratio | k per message | chosen | bitmap | varint | uint16 | rice | chosen / best | "
              "entropy bound |", "|" + "---|" * 10]
    for _, row in positions.iterrows():
        lines.append(f"| {row.workload} | {row.ratio} | {row.k:,} | {row.chosen_bytes:,} | {row.bitmap_bytes:,} | "
                     f"{row.varint_bytes:,} | {row.uint16_bytes:,} | {row.rice_bytes:,} | {row.chosen_over_best:.4f} | "
                     f"{row.entropy_bound_bytes:,.0f} |")
    dense = df[(df.workload == ONE) & (df.codec == "fp16") & (df.stage == "total")]["bytes"].iloc[0]
    top = df[(df.workload == ONE) & (df.codec == "topk") & (df.ratio == 0.5) & (df.stage == "total")]["bytes"].iloc[0]
    lines += ["", "Crossover: top-k at ratio 0.5 puts {:,} bytes on the wire, dense fp16 {:,} ({})."
              .format(int(top), int(dense), "top-k is larger" if top > dense else "top-k is smaller"), ""]
    md.write_text("\n".join(lines))


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--quick", action="store_true", help="3 repetitions, no 1e7 workload")
    ap.add_argument("--reps", type=positive_int, default=None,
                    help="repetitions for the 100-message workload (25; 3 with --quick)")
    ap.add_argument("--large-reps", type=positive_int, default=None, help="repetitions for the 1e7 workload (5)")
    ap.add_argument("--out", default="results/codec_bench")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    if args.quick and args.large_reps is not None:
        ap.error("--large-reps: --quick runs no 1e7 workload")
    args.reps, args.large_reps = args.reps or (3 if args.quick else 25), args.large_reps or 5
    command = command_line("experiments.codec_bench", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    rows, position_table = [], []
    for workload, arrays in workloads(args.quick):
        reps = args.large_reps if workload == LARGE else args.reps
        for label, options, uses_ratio, make_encoder, make_decoder in variants(workload):
            for ratio in (RATIOS if uses_ratio else ("",)):
                encoder = make_encoder(ratio if ratio != "" else 0.5)
                rows += measure(label, options, encoder, make_decoder, workload, arrays, ratio, reps)
                total = rows[-1]["seconds"]
                print(f"{workload:14s} {label:14s} {ratio!s:6s} total {total * 1e3:9.2f} ms  "
                      f"{rows[-1]['bytes']:>12,} bytes", flush=True)
        position_table += position_rows(workload, arrays)
        if workload == ONE:
            rows += head_to_head(arrays, reps)
    df = pd.DataFrame(rows)
    positions = pd.DataFrame(position_table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with together(table_file(out, ".csv"), table_file(out, ".md")) as (csv, md):
        df.to_csv(csv, index=False)
        write_report(df, positions, md, command, time.perf_counter() - start, (load_start, os.getloadavg()[0]))
    print(table_file(out, ".md").read_text())
    return df


if __name__ == "__main__":
    main()
