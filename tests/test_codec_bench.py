"""experiments.codec_bench's figures on tiny workloads and synthetic timings (no benchmark run): a total is its four
stages, position bytes are the chosen encoding's, and the tables' ratios are taken against the right baseline."""
import math

import numpy as np
import pandas as pd
import pytest

import compression
from compression.positions import position_sizes
from experiments import codec_bench
from experiments.codec_bench import ONE, SEPARATE, STAGES

ARRAYS = [np.random.default_rng(i).standard_normal(1000).astype(np.float32) for i in range(3)]


def test_a_total_is_its_four_stages_and_bytes_are_the_messages_summed():
    topk = compression.get("topk")
    seconds, payloads, messages, decoded = codec_bench.run_once(topk(0.1), topk, "topk", ARRAYS)
    assert seconds["total"] == pytest.approx(sum(seconds[s] for s in STAGES if s != "total"), rel=1e-9)
    rows = codec_bench.measure("topk", "", topk(0.1), topk, ONE, ARRAYS, 0.1, 2)
    assert [r["stage"] for r in rows] == list(STAGES)
    for r in rows:
        assert r["seconds_per_message"] == pytest.approx(r["seconds"] / 3) and r["messages"] == 3
        assert r["bytes"] == sum(len(m) for m in messages) and r["payload_bytes"] == sum(len(p) for p in payloads)
        assert r["position_encoding"] == "rice" and 0 < r["max_abs_error"] < 5


def test_position_bytes_are_the_chosen_encodings_against_the_best_and_the_entropy_bound():
    rows = {r["ratio"]: r for r in codec_bench.position_rows(ONE, ARRAYS)}
    codec = compression.TopKCompression(0.1)
    sizes, chosen, entropy = dict.fromkeys(("bitmap", "varint", "uint16", "rice"), 0), 0, 0.0
    for x in ARRAYS:
        payload = codec.encode(x)
        positions, _ = codec.decode_sparse(payload, x.size)
        each = position_sizes(positions, x.size)
        for name, size in each.items():
            sizes[name] += size
        chosen += each[codec.position_encoding(payload)]
        entropy += math.log2(math.comb(x.size, positions.size)) / 8
    r = rows[0.1]
    assert r["k"] == 100 and r["chosen_bytes"] == chosen and r["rice_bytes"] == sizes["rice"]
    assert r["chosen_over_best"] == pytest.approx(chosen / min(sizes.values()))
    assert r["entropy_bound_bytes"] == pytest.approx(entropy, rel=1e-9)


def _cells(workload, entries):
    """(codec, ratio, total seconds, bytes) -> a row per stage, each stage a quarter of the total."""
    return [dict(workload=workload, codec=codec, options="", ratio=ratio, stage=stage,
                 seconds=total if stage == "total" else total / 4, seconds_min=0.9 * total, bytes=size,
                 position_encoding="", max_abs_error=0.0)
            for codec, ratio, total, size in entries for stage in STAGES]


def test_a_stage_tables_line_is_against_the_floor_at_its_ratio_and_dense_bytes():
    df = pd.DataFrame(_cells(ONE, [("floor", 0.5, 0.002, 500), ("floor", 0.01, 0.001, 50), ("topk", 0.5, 0.003, 600),
                                   ("fp16", "", 0.001, 2000), ("none", "", 0.001, 4000)]))
    lines = codec_bench.stage_table(df, ONE).splitlines()
    assert "| topk | 0.5 | 0.75 | 0.75 | 0.75 | 0.75 | **3.00** | 1.50x | 2.70 | 600 | 0.1500 |  | 0 |" in lines
    assert "| fp16 | any | 0.25 | 0.25 | 0.25 | 0.25 | **1.00** |  | 0.90 | 2,000 | 0.5000 |  | 0 |" in lines


def test_the_reports_goals_and_comparisons_take_the_figures_they_name(tmp_path):
    both = f"{ONE} interleaved"
    df = pd.DataFrame(_cells(ONE, [("topk", 0.5, 0.004, 6_000_000), ("topk", 0.01, 0.002, 100_000),
                                   ("fp16", "", 0.002, 2_000_010), ("none", "", 0.001, 4_000_010)])
                      + _cells(SEPARATE, [("topk", 0.5, 0.03, 6_001_000), ("topk", 0.01, 0.01, 101_000),
                                          ("none", "", 0.002, 4_001_000)])
                      + _cells(both, [("topk", 0.5, 0.02, 0), ("floor", 0.5, 0.01, 0), ("topk[exact]", 0.5, 0.025, 0),
                                      ("topk", 0.01, 0.0025, 0), ("floor", 0.01, 0.002, 0),
                                      ("topk[exact]", 0.01, 0.003, 0)]))
    positions = pd.DataFrame([dict(workload=w, ratio=0.5, k=500_000, chosen_bytes=125_000, bitmap_bytes=125_000,
                                   varint_bytes=500_000, uint16_bytes=1_000_000, rice_bytes=126_000,
                                   chosen_over_best=over, entropy_bound_bytes=124_000.0)
                              for w, over in ((ONE, 1.0), (SEPARATE, 1.02))])
    md = tmp_path / "t.md"
    codec_bench.write_report(df, positions, md, "cmd", 1.0, (0.0, 0.0))
    lines = md.read_text().splitlines()
    goal = {line.split(" | ")[0]: line for line in lines if line.startswith("| ")}
    assert goal["| top-k 0.5, exact k, round trip of the workload <= 10 ms"].startswith(
        "| top-k 0.5, exact k, round trip of the workload <= 10 ms | 20.00 ms (fastest repetition 18.00 ms; "
        "threshold='exact' 25.00 ms; as 100 separate messages 30.00 ms) | **missed** |")
    assert goal["| ... within 1.5x of the floor"] == ("| ... within 1.5x of the floor | 2.00x (10.00 ms floor; "
                                                     "threshold='exact' 2.50x) | **missed** |")
    assert goal["| top-k 0.01 round trip <= 3 ms"].startswith("| top-k 0.01 round trip <= 3 ms | 2.50 ms (1.25x the "
                                                              "2.00 ms floor;")
    assert goal["| top-k 0.01 round trip <= 3 ms"].endswith("| met |")
    assert goal["| position bytes within 1% of the best encoding, every k"].endswith(
        "worst chosen/best 1.0000 (1.0200 as separate messages) | **missed** |")
    assert goal["| compress"] == "| compress | 0.0526 | 0.00100 | 53x |"  # the older framework's / ours
    assert goal["| total"] == "| total | 0.9070 | 0.00400 | 227x |"
    assert "Crossover: top-k at ratio 0.5 puts 6,000,000 bytes on the wire, dense fp16 2,000,010 (top-k is larger)." \
        in lines
