"""experiments.bench_packing: every path reads its codes back, and the tables have a line per width and length."""
import pandas as pd

from experiments import bench_packing


def test_the_benchmark_times_each_path_on_codes_it_reads_back(tmp_path):
    df = bench_packing.main(["--lengths", "100", "9000", "--reps", "1", "--out", str(tmp_path / "bp")])
    main = df[df.section == "lengths"]
    assert len(main) == 3 * 2 * 2 * 2 and set(main.path) == {"bit matrix", "pack_codes"}
    crossover = df[df.section == "crossover"]
    assert set(crossover.length) == set(bench_packing.CROSSOVER) and set(crossover.path) == {"bit matrix", "groups"}
    assert (df.bytes == (df.length * df.width + 7) // 8).all() and (df.peak_bytes_per_code > 0).all()
    table = (tmp_path / "bp.md").read_text().splitlines()
    lines = [line for line in table if line.split(" | ")[0] in ("| 12", "| 20", "| 31")]
    assert len(lines) == 6 + len(bench_packing.CROSSOVER)
    assert sum(line.count("x |") == 2 for line in lines) == 6
    assert pd.read_csv(tmp_path / "bp.csv").shape == df.shape
    assert bench_packing.main(["--lengths", "100", "--reps", "1", "--no-crossover", "--out", str(tmp_path / "b2")]) \
        .path.isin(["bit matrix", "pack_codes"]).all()
