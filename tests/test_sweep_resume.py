"""The `quick` sweep preset: killed part-way, resumed with the same command, reported from its rows alone."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parents[1]


def sweep(results, **kw):
    return subprocess.Popen([sys.executable, str(ROOT / "simulate.py"), "-m", "+experiment=quick",
                             f"results.dir={results}"], cwd=results.parent, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_quick_sweep_killed_and_resumed_reports_every_cell_exactly_once(tmp_path):
    results = tmp_path / "quick"
    first = sweep(results)
    deadline = time.monotonic() + 240
    while len(list(results.glob("*/done.json"))) < 4 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the sweep and anything it started, mid-cell
    first.wait()
    finished_before = {p.parent.name for p in results.glob("*/done.json")}
    assert 4 <= len(finished_before) < 20, "the kill should land part-way through the sweep"

    second = sweep(results)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out[-3000:]
    assert out.count("skipping") >= len(finished_before)  # finished cells are not run again

    report = subprocess.run([sys.executable, "-m", "experiments.report", str(results), "--out", str(tmp_path / "r")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    table = pd.read_csv(tmp_path / "r" / "topk_table.csv")
    # 2 seeds x (dense, dense masked, top-k at 0.1 and 0.01 x error feedback on/off x secagg none/dh)
    assert len(table) == 10 and (table["seeds"] == 2).all()
    assert not table.duplicated(["compression", "ratio", "error_feedback", "secagg", "index_policy"]).any()
    for png in ("accuracy_vs_ratio.png", "accuracy_vs_bytes.png", "time_breakdown.png"):
        assert (tmp_path / "r" / png).stat().st_size > 10_000
    for rows in results.glob("*/rounds.csv"):  # every run complete, rows never duplicated
        frame = pd.read_csv(rows)
        assert list(frame["round"]) == list(range(5))
