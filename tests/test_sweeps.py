"""`python simulate.py -m`: a sweep's cells share one Ray and one warm pool, give the rows each cell gives
inline, and leave no process behind, including after Ctrl-C; the cluster launcher and submitit's launcher
give the same rows."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

import fl

ROOT = Path(__file__).resolve().parents[1]
COMPUTED = ["config_hash", "round", "accuracy", "loss", "bytes_up", "bytes_down", "catchups", "dropped"]
CELLS = ["model=mlp_small", "fl.rounds=2", "fl.num_clients=12", "fl.clients_per_round=6", "compression.ratio=0.1",
         "secagg=none,dh", "seed=0,1"]


def sweep(*overrides, results, timeout=600, returncode=0):
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", *overrides, f"results.dir={results}"],
                         capture_output=True, text=True, timeout=timeout, cwd=results.parent)
    assert out.returncode == returncode, out.stderr[-3000:]
    return out.stdout + out.stderr


def rows(results: Path) -> dict[str, pd.DataFrame]:
    return {d.name: pd.read_csv(d / "rounds.csv")[COMPUTED] for d in results.iterdir() if (d / "done.json").exists()}


@pytest.fixture(scope="module")
def inline(tmp_path_factory):
    results = tmp_path_factory.mktemp("inline") / "runs"
    sweep(*CELLS, "backend=inline", results=results)
    found = rows(results)
    assert len(found) == 4
    return found


def same(found: dict, expected: dict) -> None:
    assert sorted(found) == sorted(expected)
    for chash in expected:
        pd.testing.assert_frame_equal(found[chash], expected[chash])


def test_a_ray_sweep_starts_one_pool_for_all_its_cells_and_matches_inline(tmp_path, inline):
    output = sweep(*CELLS, "backend=ray", results=tmp_path / "runs")
    same(rows(tmp_path / "runs"), inline)
    assert output.count("the sweep's warm pool of 2 workers serves this cell") == 3  # cells 2-4 reused cell 1's


def test_ctrl_c_in_a_ray_sweep_leaves_no_process_behind(tmp_path):
    results = tmp_path / "runs"
    # Ctrl-C in a terminal: SIGINT at its default in the child, even where this test runs in the background of
    # a non-interactive shell, whose children inherit SIGINT ignored (and Python then never raises KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, str(ROOT / "simulate.py"), "-m", "backend=ray", "model=mlp_small",
                             "fl.rounds=200", "secagg=none", "compression=none", "seed=0,1", f"results.dir={results}"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 180
    while not list(results.glob("*/rounds.csv")) or len(pd.read_csv(next(results.glob("*/rounds.csv")))) < 3:
        assert time.time() < deadline and proc.poll() is None, "the sweep did not reach its third round"
        time.sleep(0.5)
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any("ray::RemoteWorker" in " ".join(p.cmdline()) for p in tree if p.is_running())  # the pool is up
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, [p.cmdline()[:2] for p in alive]
    assert list(results.glob("*/failed-*.txt"))  # the interrupted cell is recorded, its rows kept


def test_a_sweep_on_a_two_node_ray_cluster_matches_inline():
    """ray.cluster_utils.Cluster: two raylets on this machine; hydra/launcher=ray_cells spreads the cells."""
    out = subprocess.run([sys.executable, "-m", "experiments.bench_sweep", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    inline, cluster = json.loads(out.stdout.split("JSON ", 1)[1])
    assert inline["cells"] == cluster["cells"] == 6, (inline["failed"], cluster["failed"])  # 8 cells, 2 repeats
    assert cluster["equal_to_inline"] == 6  # every cell's rows equal the same cell run inline
    assert cluster["nodes"] == 2  # cells ran on both nodes (each node holds one cell at a time)


def test_submitit_local_executor_runs_the_cells_with_the_same_rows(tmp_path, inline):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[cluster]'")
    sweep(*CELLS, "backend=inline", "hydra/launcher=submitit_local", results=tmp_path / "runs")
    same(rows(tmp_path / "runs"), inline)


def test_a_sweep_with_a_refused_cell_names_every_refused_cell_and_runs_none(tmp_path):
    """Every cell is validated before the first runs (hydra/sweeper=checked, the default): a refused cell used to
    stop the sweep only when its turn came, after the cells before it had run."""
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "backend=inline", "model=mlp_small",
                          "fl.rounds=1", "compression.ratio=0.1,1.5", "secagg=none,dh", "seed=0,1",
                          f"results.dir={results}"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    start = lines.index("fedsqueeze: configuration refused for 4 of 8 cells; none ran:")
    assert all("compression.ratio=1.5" in line and line.endswith("compression.ratio must be in (0, 1], got 1.5")
               for line in lines[start + 1:start + 5])
    assert not list(results.rglob("rounds.csv")) and not list(results.rglob("config.json"))


def test_a_sweep_refuses_a_cell_whose_switch_is_a_number_other_than_0_or_1(tmp_path):
    """OmegaConf read compression.client=2 as true: the cell ran, with client compression on."""
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "backend=inline", "model=mlp_small",
                          "fl.rounds=1", "secagg=none", "compression.client=0,2", f"results.dir={results}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "configuration refused for 1 of 2 cells; none ran:" in out.stderr
    assert "compression.client is a switch: true or false, got 2" in out.stderr
    assert not list(results.rglob("rounds.csv"))


def test_a_sweep_refuses_a_cell_whose_preset_sets_a_switch_to_2_before_any_cell_runs(tmp_path):
    """The up-front check validated each cell's config but not its presets' switches (which the typed config reads
    as true): the good cell trained and the bad one was refused only when its turn came."""
    (tmp_path / "conf" / "compression").mkdir(parents=True)
    (tmp_path / "conf" / "compression" / "topk_bad.yaml").write_text("name: topk\nratio: 0.1\nclient: 2\n")
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "backend=inline", "model=mlp_small",
                          "fl.rounds=1", "secagg=none", "compression=none,topk_bad",
                          f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"results.dir={results}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "configuration refused for 1 of 2 cells; none ran:" in out.stderr
    assert "topk_bad.yaml: compression.client is a switch: true or false, got 2" in out.stderr
    assert not list(results.rglob("rounds.csv"))


@pytest.mark.parametrize("empty", ["secagg=glob(rsa*)", "seed=range(0,0)"])
def test_a_sweep_of_no_cells_is_refused_naming_the_key_swept_over_nothing(tmp_path, empty):
    """A typo'd glob() or an empty range() made a sweep of no cells, which exited 0 as if it had run, so
    `simulate -m ... && report` reported whatever rows were already there."""
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "backend=inline", "model=mlp_small",
                          "fl.rounds=1", "compression.ratio=0.1,0.5", empty, f"results.dir={results}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"fedsqueeze: configuration refused: the sweep has no cells; no values in: {empty}" in out.stderr
    assert not results.exists()


def test_a_sweep_its_experiment_makes_over_nothing_is_refused_too(tmp_path):
    """An experiment's sweep (hydra.sweeper.params) is swept as the command line's is: an empty one runs no cells."""
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "+experiment=quick",
                          "hydra.sweeper.params.seed='range(0,0)'", f"results.dir={results}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "the sweep has no cells; no values in: seed=range(0,0)" in out.stderr
    assert not results.exists()


def test_a_key_the_command_line_gives_values_is_swept_over_them_though_the_experiment_sweeps_it_over_nothing(
        tmp_path):
    """Hydra sweeps a key's last override, the command line's over the experiment's: the sweep has cells and runs."""
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(ROOT / "simulate.py"), "-m", "+experiment=quick",
                          "hydra.sweeper.params.seed='range(0,0)'", "seed=0", "compression.ratio=0.1",
                          "compression.error_feedback=true", "secagg=none", "fl.rounds=1", f"results.dir={results}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list(results.rglob("rounds.csv"))) == 1


@pytest.mark.parametrize("launcher", ["basic", "ray_cells", "submitit_local"])
def test_a_cell_the_data_refuses_is_named_the_other_cells_run_and_the_sweep_exits_1(tmp_path, launcher):
    """A refusal only the data can make (more clients than samples) comes when its cell runs: it is printed, and the
    sweep goes on (it used to end the sweep there, or crash a ray_cells cell's Ray task). The sweep then exits 1,
    naming the cell (it exited 0, so `simulate -m ... && report` went on as if every cell had run; under submitit,
    whose cells run in processes of their own, it still did)."""
    if launcher == "submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[cluster]'")
    results = tmp_path / "runs"
    out = sweep("backend=inline", "model=mlp_small", "fl.rounds=1", "fl.num_clients=2000,10",
                f"hydra/launcher={launcher}", results=results, returncode=1)
    if launcher == "basic":  # (a ray_cells cell prints in its Ray task's log)
        assert "configuration refused: fl.num_clients=2000: 2000 clients cannot each get 1 of 1437 training " \
               "samples" in out
        assert "this cell is refused; the sweep goes on" in out
    assert "fedsqueeze: 1 cell(s) of the sweep did not finish; rerun the command to retry (a refused cell is " \
           "refused again until its configuration changes):" in out  # it read as if a rerun could help
    (line,) = [line for line in out.splitlines() if line.startswith("  refused: ")]
    assert "fl.num_clients=2000" in line and "fl.num_clients=10" not in line
    (done,) = list(results.glob("*/done.json"))
    assert pd.read_csv(done.parent / "rounds.csv")["num_clients"].tolist() == [10]


def test_a_ray_cells_cell_whose_process_dies_is_named_with_the_others_that_did_not_finish(tmp_path):
    """A cell whose Ray task dies (the OOM killer, a lost node) is a failed cell: the other cells run, and the sweep
    names every cell that did not finish. Its FAILED return made Hydra's sweeper raise once all had run: a traceback
    naming that cell alone, not the refused ones."""
    script = tmp_path / "dying.py"  # simulate.py's task, whose process dies in one cell
    script.write_text(f"""import os, sys
sys.path.insert(0, {str(ROOT)!r})
import hydra
import simulate
from fl.sweep import UNFINISHED

@hydra.main(config_path={str(ROOT / "conf")!r}, config_name="config", version_base="1.3")
def main(cfg):
    if cfg.seed == 1 and cfg.fl.num_clients == 10:
        os._exit(9)
    return simulate.main.__wrapped__(cfg)

if __name__ == "__main__":
    main()
    print("did not finish:", *UNFINISHED, sep="\\n")
""")
    results = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(script), "-m", "hydra/launcher=ray_cells", "backend=inline",
                          "model=mlp_small", "fl.rounds=1", "seed=0,1", "fl.num_clients=2000,10",
                          f"results.dir={results}"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("did not finish:\n", 1)[1].splitlines()
    assert sorted(line.split(":")[0] for line in lines) == ["failed", "refused", "refused"], lines
    (failed,) = [line for line in lines if line.startswith("failed: ")]
    assert "seed=1" in failed and "fl.num_clients=10" in failed
    (done,) = list(results.glob("*/done.json"))
    assert pd.read_csv(done.parent / "rounds.csv")[["seed", "num_clients"]].values.tolist() == [[0, 10]]


def test_a_ray_cells_cell_no_node_can_hold_is_refused_before_any_cell_starts(tmp_path):
    """A cell asking for more CPUs than the largest node has would wait forever; it is named with what it asked
    for, exit 2, and no cell runs (the one that fits came first, and had started). Workers are capped at the
    cohort: 8 asked for a cohort of 1 reserve 1 (it fits 2 cores), for a cohort of 10 reserve 8 (it does not)."""
    results = tmp_path / "runs"
    out = sweep("backend=ray", "model=mlp_small", "fl.rounds=1", "secagg=none", "ray.num_workers=8",
                "fl.clients_per_round=1,10", "hydra/launcher=ray_cells", results=results, returncode=2)
    lines = out.splitlines()
    start = lines.index("fedsqueeze: 1 of 2 cells fit on no node of the cluster; none ran:")
    assert "fl.clients_per_round=10" in lines[start + 1] and "lower ray.num_workers" in lines[start + 1]
    assert "Traceback" not in out and not list(results.rglob("rounds.csv"))


@pytest.mark.parametrize("cpus", ["nan", "0", "-4"])
def test_a_ray_cells_driver_share_that_is_not_a_positive_number_is_refused_before_ray_starts(tmp_path, cpus):
    """NaN was refused as a cell that fits on no node, with advice to lower ray.num_workers; 0 and -4 passed."""
    results = tmp_path / "runs"
    out = sweep("backend=inline", "model=mlp_small", "fl.rounds=1", "secagg=none", "seed=0,1",
                "hydra/launcher=ray_cells", f"hydra.launcher.driver_cpus={cpus}", results=results, returncode=2)
    assert f"configuration refused: hydra.launcher.driver_cpus must be > 0 and finite, got {float(cpus)}" in out
    assert "Traceback" not in out and not list(results.rglob("rounds.csv"))


def test_ray_cells_runs_a_repeated_configuration_once_per_results_folder(tmp_path):
    """`-m results.dir=a,b`: the second cell computes what the first does but writes elsewhere; it was taken for a
    repeat and never wrote into b."""
    from omegaconf import OmegaConf, open_dict

    import fl
    from hydra_plugins.fedsqueeze_launcher.ray_cells import _computes

    def cell(results, seed=0):
        config = fl.compose(["model=mlp_small", "secagg=none", f"seed={seed}", f"results.dir={results}"])
        with open_dict(config):
            config.hydra = OmegaConf.create({"job": {"num": 0}})
        return config

    a, b = tmp_path / "a", tmp_path / "b"
    assert _computes(cell(a)) == _computes(cell(a)) != _computes(cell(b))
    assert _computes(cell(a)) != _computes(cell(a, seed=1))


def test_a_ray_cells_cell_reserves_its_driver_and_no_more_workers_than_its_cohort():
    from fl.sweep import cell_bundles

    cfg = fl.compose(["backend=ray", "ray.num_workers=64", "fl.num_clients=10", "fl.clients_per_round=3",
                      "ray.num_cpus_per_worker=0.5"])
    assert cell_bundles(cfg, 1.0) == [{"CPU": 1.0}] + [{"CPU": 0.5}] * 3
    assert cell_bundles(fl.compose(["backend=inline"]), 0.25) == [{"CPU": 0.25}]
