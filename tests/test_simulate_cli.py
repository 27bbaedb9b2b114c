"""`python simulate.py`: the Hydra entry point runs, writes rows, and refuses bad input before any work."""
import pathlib
import signal
import subprocess
import sys

import pandas as pd
import pytest

from fl.results import read_rows

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


def test_relative_paths_resolve_against_the_directory_run_from_even_under_hydra_job_chdir(tmp_path):
    """With hydra.job.chdir=true each cell's rows went to <results.dir>/sweeps/<time>/<n>/<results.dir>/, inside the
    sweep's record: a rerun of the same command found none of them and ran every cell again."""
    cell = ["-m", "hydra.job.chdir=true", "backend=inline", "model=mlp_small", "fl.rounds=1", "secagg=none", "seed=0,1",
            "results.dir=runs"]
    first = simulate(*cell, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert sorted(p.parent.parent.name for p in tmp_path.glob("**/rounds.csv")) == ["runs", "runs"]
    again = simulate(*cell, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("skipping") == 2, again.stderr


@pytest.mark.parametrize("override,message", [
    ("compression.ratio=0", "compression.ratio must be in (0, 1]"),
    ("compression.ratio=1.01", "compression.ratio must be in (0, 1]"),
    ("fl.roundz=3", "roundz"),
    ("secagg=rsa", "dh"),
    ("compression.name=zip", "registered: none, topk"),
    ("compression.client=2", "compression.client is a switch: true or false, got 2"),  # OmegaConf read it as true
])
def test_bad_configuration_is_refused_and_writes_nothing(tmp_path, override, message):
    out = simulate("backend=inline", override, f"results.dir={tmp_path / 'runs'}", cwd=tmp_path)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout
    assert not (tmp_path / "runs").exists()


def test_a_cell_another_process_is_running_is_left_to_it_and_a_sweep_goes_on(tmp_path):
    import fl
    from fl.config import as_dict, validate
    from fl.results import LOCK_NAME, RunLog, config_hash

    runs = tmp_path / "runs"
    cell = ["backend=inline", "model=mlp_small", "fl.rounds=1", "secagg=none", f"results.dir={runs}"]
    theirs = RunLog(runs, config_hash(as_dict(validate(fl.compose([*cell, "seed=0"])))), "theirs")
    theirs.claim()  # this test's process plays the one running seed 0
    try:
        alone = simulate(*cell, "seed=0", cwd=tmp_path)
        assert alone.returncode == 2 and "fedsqueeze: not run: " in alone.stderr and "run theirs" in alone.stderr
        sweep = simulate("-m", *cell, "seed=0,1", cwd=tmp_path)
        assert sweep.returncode == 1, sweep.stderr  # the other cell ran; the sweep says one did not
        assert "this cell is left to that process; the sweep goes on" in sweep.stderr
        assert "  left to another process: " in sweep.stderr and "seed=0" in sweep.stderr.split("did not finish")[1]
        assert [p.name for p in theirs.dir.iterdir()] == [LOCK_NAME]  # nothing of theirs moved, nothing of ours added
        assert len([p for p in runs.glob("*/done.json")]) == 1  # seed 1 ran
    finally:
        theirs.release()


def _stop_a_long_run(tmp_path, sig, after_rows: int):
    """Start a 400-round inline run, send it `sig` once its rounds.csv holds more than `after_rows` lines; its
    (process, stderr, results folder)."""
    import time

    runs = tmp_path / "runs"
    args = [sys.executable, str(ROOT / "simulate.py"), "backend=inline", "model=mlp_small", "fl.rounds=400",
            "secagg=none", f"results.dir={runs}"]
    # A shell ignores SIGINT in what it starts in the background (`pytest &`, nohup), and a child inherits that: with
    # a handler of its own here the child starts with the default, whatever this process was given.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if inherited is None else inherited)  # None: set outside Python
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(len(p.read_text().splitlines()) > after_rows
                                                  for p in runs.glob("*/rounds.csv")):
        time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    return proc, err, folder


def test_ctrl_c_ends_a_run_with_one_line_and_status_130_keeping_its_rows(tmp_path):
    """Interrupted mid-run: no trace of whatever torch was doing, and its rows so far kept (unfinished)."""
    proc, err, folder = _stop_a_long_run(tmp_path, signal.SIGINT, 2)
    assert proc.returncode == 130 and "Traceback" not in err and "fedsqueeze: interrupted." in err
    assert not (folder / "done.json").exists() and len(pd.read_csv(folder / "rounds.csv")) >= 2


def test_sigterm_ends_a_run_through_its_handlers_keeping_the_round_that_waited_for_its_evaluation(tmp_path):
    """`kill` or a scheduler's time limit (SIGTERM) ended an inline run at once: the round whose evaluation rode on
    the next round's training was lost, no failed-<run_id>.txt said the run had ended, and its lock file stayed."""
    proc, _, folder = _stop_a_long_run(tmp_path, signal.SIGTERM, 3)
    assert proc.returncode == 128 + signal.SIGTERM
    rows = read_rows(folder / "rounds.csv")  # a run id such as 20847470e222 must not read as a number
    (failed,) = folder.glob("failed-*.txt")
    assert failed.name == f"failed-{rows['run_id'].iloc[0]}.txt" and "SystemExit" in failed.read_text()
    assert not (folder / "running.lock").exists() and not (folder / "done.json").exists()
    assert list(rows["round"]) == list(range(len(rows))) and len(rows) >= 3


@pytest.mark.parametrize("entry", ["import fl",
                                   "import runpy; sys.argv = ['simulate.py']; runpy.run_path('simulate.py')"])
def test_python_3_14_is_refused_naming_the_clash_of_the_two_compression_packages(entry):
    """On 3.14 the standard library's own `compression` (PEP 784), hidden by ours, broke gzip's import with an
    error that named neither; the entry points refuse it first (the interpreter's version patched here)."""
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.version_info = (3, 14, 0, 'final', 0); {entry}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 1
    assert "fedsqueeze runs on Python 3.10-3.13: 3.14's standard library has a package named compression" in out.stderr
