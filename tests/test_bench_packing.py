"""experiments.bench_packing: both paths read their codes back, and the table has a line per width and length."""
import pandas as pd

from experiments import bench_packing


def test_the_benchmark_times_both_paths_on_codes_they_read_back(tmp_path, capsys):
    df = bench_packing.main(["--lengths", "100", "9000", "--reps", "1", "--out", str(tmp_path / "bp")])
    assert len(df) == 3 * 2 * 2 * 2 and set(df.path) == {"bit matrix", "pack_codes"}
    assert (df.bytes == (df.length * df.width + 7) // 8).all() and (df.peak_bytes_per_code > 0).all()
    table = (tmp_path / "bp.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("| 12 |") or line.startswith("| 20 |")
             or line.startswith("| 31 |")]
    assert len(lines) == 6 and all(line.count("x |") == 2 for line in lines)
    assert pd.read_csv(tmp_path / "bp.csv").shape == df.shape
