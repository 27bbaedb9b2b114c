"""`python simulate.py`: the Hydra entry point runs, writes rows, and refuses bad input before any work."""
import pathlib
import subprocess
import sys

import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def simulate(*overrides, cwd):
    return subprocess.run([sys.executable, str(ROOT / "simulate.py"), *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_simulate_writes_one_row_per_round_and_shows_progress(tmp_path):
    out = simulate("backend=inline", "model=mlp_small", "fl.rounds=2", f"results.dir={tmp_path / 'runs'}",
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = pd.read_csv(next((tmp_path / "runs").glob("*/rounds.csv")))
    assert list(rows["round"]) == [0, 1]
    assert "acc=" in out.stderr and "final accuracy" in out.stdout


@pytest.mark.parametrize("override,message", [
    ("compression.ratio=0", "compression.ratio must be in (0, 1]"),
    ("compression.ratio=1.01", "compression.ratio must be in (0, 1]"),
    ("fl.roundz=3", "roundz"),
    ("secagg=rsa", "dh"),
    ("compression.name=zip", "registered: none, topk"),
])
def test_bad_configuration_is_refused_and_writes_nothing(tmp_path, override, message):
    out = simulate("backend=inline", override, f"results.dir={tmp_path / 'runs'}", cwd=tmp_path)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout
    assert not (tmp_path / "runs").exists()
