"""fl.launch, fl.sweep and the ray_cells launcher without a real Ray: what a run does with a sweep's warm pool and
Ray, a finished run found at the last moment or while another process holds its folder, what a cell reserves,
and how the launcher plans, reserves, gives back and reports its cells."""
import json
import os
import sys
from types import ModuleType, SimpleNamespace

import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf, open_dict

import fl
import fl.sweep
from fl import launch
from fl.config import as_dict, validate
from fl.results import RunLog, config_hash
from fl.runtime import warm
from hydra_plugins.fedsqueeze_launcher import ray_cells

CELL = ["model=mlp_small", "secagg=none", "fl.rounds=1"]


class FakePool:
    def __init__(self):
        self.closed, self.dead = False, set()

    def close(self):
        self.closed = True


@pytest.fixture
def fake_ray(monkeypatch):
    """Ray's start and stop recorded, never run; the warm module fresh and its exit hook already in place."""
    calls = []
    monkeypatch.setattr(launch.raystart, "start", lambda address=None: calls.append(("start", address)) or True)
    monkeypatch.setattr(launch.raystart, "stop", lambda: calls.append(("stop",)))
    monkeypatch.setattr(launch.raystart, "in_ray_worker", lambda: False)
    for name, value in (("_pool", None), ("_pool_key", None), ("_data", None), ("_data_key", None),
                        ("_exit_hook", True)):
        monkeypatch.setattr(warm, name, value)
    return calls


def run(tmp_path, *overrides, keep=False):
    return fl.run(fl.compose([f"results.dir={tmp_path}", *CELL, *overrides]), keep_warm=keep)


def fake_simulate(monkeypatch, body=lambda: "rows"):
    import fl.simulation

    calls = []

    def simulate(cfg, cfg_dict, chash, log, t_start, loading, keep):
        loading.result()
        calls.append(keep)
        return body()

    monkeypatch.setattr(fl.simulation, "simulate", simulate)
    return calls


# --- fl.launch ----------------------------------------------------------------------------------


def test_a_run_outside_a_sweep_first_closes_the_warm_pool_of_an_earlier_sweep(tmp_path, monkeypatch, fake_ray):
    """Its workers hold their cores: a run that makes a pool of its own must not compete with them."""
    fake_simulate(monkeypatch)
    earlier = FakePool()
    monkeypatch.setattr(warm, "_pool", earlier)
    assert run(tmp_path, "backend=inline") == "rows"
    assert earlier.closed and warm._pool is None


def test_a_sweep_cell_that_raises_takes_its_warm_pool_with_it(tmp_path, monkeypatch, fake_ray):
    pool = FakePool()

    def crash():
        monkeypatch.setattr(warm, "_pool", pool)  # the cell's pool, as warm.pool leaves it
        raise RuntimeError("a crash mid-round")

    fake_simulate(monkeypatch, crash)
    with pytest.raises(RuntimeError, match="a crash mid-round"):
        run(tmp_path, "backend=ray", keep=True)
    assert pool.closed and warm._pool is None
    assert fake_ray == [("start", None)]  # the sweep's Ray stays for the next cell


def test_a_sweep_cell_leaves_ray_running_for_the_next_and_a_single_run_stops_it(tmp_path, monkeypatch, fake_ray):
    kept = fake_simulate(monkeypatch)
    run(tmp_path, "backend=ray", "seed=1", keep=True)
    assert fake_ray == [("start", None)] and kept == [True]
    run(tmp_path, "backend=ray", "seed=2")
    assert fake_ray == [("start", None), ("start", None), ("stop",)] and kept == [True, False]


def test_a_cell_inside_a_ray_worker_keeps_nothing_warm_and_stops_the_ray_it_started(tmp_path, monkeypatch, fake_ray):
    """A ray_cells cell: its pool lives in its reservation, never past the cell."""
    kept = fake_simulate(monkeypatch)
    monkeypatch.setattr(launch.raystart, "in_ray_worker", lambda: True)
    run(tmp_path, "backend=ray", keep=True)
    assert kept == [False] and fake_ray == [("start", None), ("stop",)]


def finish(folder, run_id="f1n15hed0001"):
    """A finished run's files, as another process leaves them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rounds.csv").write_text(f"run_id,config_hash,round\n{run_id},{folder.name},0\n")
    (folder / "done.json").write_text(json.dumps({"run_id": run_id, "rounds": 1}))


def chash_of(tmp_path, *overrides):
    return config_hash(as_dict(validate(fl.compose([f"results.dir={tmp_path}", *CELL, *overrides]))))


def test_a_run_another_process_finished_while_this_one_waited_for_its_folder_is_read_not_run(tmp_path, monkeypatch,
                                                                                            fake_ray):
    """Not finished when looked at, finished once claimed: running it again would move the other's rows aside."""
    simulated = fake_simulate(monkeypatch)
    folder = tmp_path / chash_of(tmp_path, "backend=inline")
    claim = RunLog.claim

    def claim_after_the_other_finished(self):
        finish(folder)
        claim(self)

    monkeypatch.setattr(RunLog, "claim", claim_after_the_other_finished)
    rows = run(tmp_path, "backend=inline")
    assert rows["run_id"].tolist() == ["f1n15hed0001"] and simulated == []
    assert sorted(p.name for p in folder.iterdir()) == ["done.json", "rounds.csv"]


def test_a_finished_run_is_read_even_while_another_process_holds_its_folder(tmp_path, monkeypatch, fake_ray):
    """A process that just wrote done.json holds the lock until it exits: a sweep meeting the cell then must skip it
    as finished, not report it as left to another process."""
    simulated = fake_simulate(monkeypatch)
    chash = chash_of(tmp_path, "backend=inline")
    finish(tmp_path / chash)
    theirs = RunLog(tmp_path, chash, "theirs")
    theirs.claim()
    try:
        rows = run(tmp_path, "backend=inline")
    finally:
        theirs.release()
    assert rows["run_id"].tolist() == ["f1n15hed0001"] and simulated == []


# --- fl.sweep -----------------------------------------------------------------------------------


def test_a_cell_that_leaves_num_workers_null_reserves_one_worker():
    cfg = fl.compose(["backend=ray", "fl.clients_per_round=4"])
    assert cfg.ray.num_workers is None
    assert fl.sweep.cell_bundles(cfg, 1.0) == [{"CPU": 1.0}, {"CPU": 1.0}]


def test_a_cell_reserves_the_gpus_of_its_workers():
    cfg = fl.compose(["backend=ray", "ray.num_workers=2", "ray.num_gpus_per_worker=0.5"])
    assert fl.sweep.cell_bundles(cfg, 0.5) == [{"CPU": 0.5}, {"CPU": 1.0, "GPU": 0.5}, {"CPU": 1.0, "GPU": 0.5}]


def test_an_unfinished_cell_is_recorded_and_its_status_returned(monkeypatch):
    """ray_cells reads the status a cell's task returns: None would count a refused cell as finished."""
    monkeypatch.setattr(fl.sweep, "UNFINISHED", [])
    assert fl.sweep.unfinished("refused", ["seed=1", "fl.rounds=2"]) == "refused"
    assert fl.sweep.UNFINISHED == ["refused: seed=1 fl.rounds=2"]


def test_the_sweeps_end_closes_its_warm_pool_and_ray(monkeypatch):
    closed = []
    monkeypatch.setattr(warm, "close", lambda: closed.append(True))
    fl.sweep.EndWarmPool().on_multirun_end(config=None)
    assert closed == [True]


def fake_ray_module(monkeypatch, **attrs):
    ray = ModuleType("ray")
    for name, value in attrs.items():
        setattr(ray, name, value)
    monkeypatch.setitem(sys.modules, "ray", ray)
    return ray


def test_a_cell_runs_in_the_folder_the_sweep_was_launched_from_where_the_node_has_it(tmp_path, monkeypatch):
    """Relative results.dir and sweep dir resolve as on the launching machine; a node without that folder stays put."""
    seen = []
    monkeypatch.setattr(fl.sweep, "setup_globals", lambda: None)
    monkeypatch.setattr(fl.sweep, "run_job", lambda **kw: seen.append((os.getcwd(), kw["job_dir_key"])) or "ret")
    fake_ray_module(monkeypatch, get_runtime_context=lambda: SimpleNamespace(get_node_id=lambda: "node-1"))
    monkeypatch.chdir(tmp_path)  # restored after the test
    (tmp_path / "launched").mkdir()
    assert fl.sweep.run_cell(None, None, None, str(tmp_path / "launched")) == ("node-1", "ret")
    assert seen[-1] == (str(tmp_path / "launched"), "hydra.sweep.dir")
    fl.sweep.run_cell(None, None, None, str(tmp_path / "not-on-this-node"))
    assert seen[-1][0] == str(tmp_path / "launched")


# --- the ray_cells launcher ---------------------------------------------------------------------


def test_a_reservation_fits_a_live_node_exactly_and_sums_its_bundles(monkeypatch):
    nodes = [{"Alive": True, "Resources": {"CPU": 4.0}}, {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]
    fake_ray_module(monkeypatch, nodes=lambda: nodes)
    assert ray_cells._does_not_fit([{"CPU": 1.0}, {"CPU": 1.5}, {"CPU": 1.5}]) is None  # 4 CPUs on a 4-CPU node
    why = ray_cells._does_not_fit([{"CPU": 1.0}, {"CPU": 2.0}, {"CPU": 2.0}])  # 5: on the dead node only
    assert why.startswith("asks for {'CPU': 5.0} on one node") and "the largest node has {'CPU': 4.0}" in why
    assert ray_cells._does_not_fit([{"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]) is not None  # no live GPU


class Launch:
    """A fake Ray under RayCellLauncher.launch: tasks answer from `died` (raise) or complete on node-<idx>."""

    def __init__(self, monkeypatch, tmp_path, died=()):
        self.groups, self.removed, self.tasks, self.died = [], [], [], set(died)
        ray = fake_ray_module(monkeypatch, nodes=lambda: [{"Alive": True, "Resources": {"CPU": 16.0}}],
                              remote=lambda **kw: lambda fn: SimpleNamespace(options=self.options),
                              wait=lambda refs, num_returns: (refs[:1], refs[1:]), get=self.get)
        util = ModuleType("ray.util")
        groups = ModuleType("ray.util.placement_group")
        groups.placement_group = lambda bundles, strategy: self.groups.append(bundles) or f"group{len(self.groups)}"
        groups.remove_placement_group = self.removed.append
        strategies = ModuleType("ray.util.scheduling_strategies")
        strategies.PlacementGroupSchedulingStrategy = lambda group, **kw: group
        ray.util = util
        for name, module in (("ray.util", util), ("ray.util.placement_group", groups),
                             ("ray.util.scheduling_strategies", strategies)):
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setattr(ray_cells.raystart, "start", lambda address=None: True)
        monkeypatch.setattr(ray_cells.raystart, "stop", lambda: None)
        monkeypatch.setattr(ray_cells, "configure_log", lambda *a: None)
        monkeypatch.setattr(ray_cells, "UNFINISHED", [])
        self.sweep = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}, "hydra_logging": None,
                                                 "verbose": False}})
        loader = SimpleNamespace(load_sweep_config=lambda config, overrides: self.compose(tmp_path, overrides))
        self.launcher = ray_cells.RayCellLauncher()
        self.launcher.setup(hydra_context=SimpleNamespace(config_loader=loader), task_function=None,
                            config=self.sweep)

    @staticmethod
    def compose(tmp_path, overrides):
        config = fl.compose([f"results.dir={tmp_path / 'runs'}", *overrides])
        with open_dict(config):
            config.hydra = OmegaConf.create({"job": {"id": None, "num": None}})
        return config

    def options(self, num_cpus, scheduling_strategy):
        def remote(hydra_context, task_function, config, cwd):
            self.tasks.append((scheduling_strategy, config))
            return len(self.tasks) - 1
        return SimpleNamespace(remote=remote)

    def get(self, ref):
        group, config = self.tasks[ref]
        if ref in self.died:
            raise RuntimeError("the task's process died")
        return f"node-{ref}", JobReturn(overrides=[], cfg=config, status=JobStatus.COMPLETED, _return_value=None)

    def __call__(self, cells):
        return self.launcher.launch([list(cell) for cell in cells], initial_job_idx=0)


def test_a_cell_with_num_workers_null_runs_with_the_one_worker_it_reserved(tmp_path, monkeypatch):
    """Left null, the cell's pool would take one worker per core of the node inside a reservation of one."""
    fake = Launch(monkeypatch, tmp_path)
    fake([["backend=ray", "fl.clients_per_round=4"]])
    assert fake.groups == [[{"CPU": 1.0}, {"CPU": 1.0}]]
    assert fake.tasks[0][1].ray.num_workers == 1


def test_every_cells_reservation_is_given_back_and_a_repeat_runs_once(tmp_path, monkeypatch):
    fake = Launch(monkeypatch, tmp_path)
    returns = fake([["backend=inline", "seed=0"], ["backend=inline", "seed=1"], ["backend=inline", "seed=0"]])
    assert len(fake.tasks) == 2 and sorted(fake.removed) == ["group1", "group2"]
    assert [r.status for r in returns] == [JobStatus.COMPLETED] * 3 and fake.launcher.nodes == ["node-0", "node-1",
                                                                                              "node-0"]
    assert ray_cells.UNFINISHED == []


def test_a_cell_whose_task_died_is_failed_listed_unfinished_and_the_sweep_goes_on(tmp_path, monkeypatch):
    fake = Launch(monkeypatch, tmp_path, died={0})
    returns = fake([["backend=inline", "seed=0"], ["backend=inline", "seed=1"]])
    # a failed cell, as the task returns one: a FAILED return is raised by Hydra's sweeper, ending the sweep
    assert [r.status for r in returns] == [JobStatus.COMPLETED] * 2 and returns[0].return_value == "failed"
    assert ray_cells.UNFINISHED == ["failed: backend=inline seed=0"]
    assert sorted(fake.removed) == ["group1", "group2"]  # the dead task's reservation too


def test_one_configuration_into_two_results_folders_runs_twice_and_one_folder_spelled_twice_runs_once(tmp_path,
                                                                                                      monkeypatch):
    """`-m results.dir=a,b` must write both folders (taken for a repeat, b was never written); `a` and `a/.` are one
    folder: run twice at once, the second would be refused by the first's lock and the sweep would exit 1."""
    fake = Launch(monkeypatch, tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    fake([["backend=inline", f"results.dir={a}"], ["backend=inline", f"results.dir={b}"],
          ["backend=inline", f"results.dir={a}/."]])
    assert [str(config.results.dir) for _, config in fake.tasks] == [str(a), str(b)]


def test_a_repeat_of_a_cell_whose_task_died_did_not_finish_either(tmp_path, monkeypatch):
    """The checked sweeper lists unfinished cells from what each returned: a repeat read as finished would be
    missing from that list (and from the rerun's advice)."""
    fake = Launch(monkeypatch, tmp_path, died={0})
    returns = fake([["backend=inline", "seed=0"], ["backend=inline", "seed=1"], ["backend=inline", "seed=0"]])
    assert [r.return_value for r in returns] == ["failed", None, "failed"]


def test_a_cell_no_node_can_hold_ends_the_launch_before_any_cell_starts(tmp_path, monkeypatch):
    """Its reservation would wait forever, holding the sweep (and the cells before it) with it."""
    fake = Launch(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as refused:
        fake([["backend=inline", "seed=0"], ["backend=ray", "ray.num_workers=32", "fl.clients_per_round=32"]])
    assert refused.value.code == 2 and fake.tasks == [] and fake.groups == []


def test_a_launch_stops_the_ray_it_started_and_never_retries_a_cell(tmp_path, monkeypatch):
    """Ray left running holds the machine's cores after the sweep; a cell whose process died (the OOM killer) retried
    by Ray would die again, the sweep waiting on it, instead of being named as failed."""
    fake = Launch(monkeypatch, tmp_path, died={0})
    stopped, remote = [], sys.modules["ray"].remote
    monkeypatch.setattr(ray_cells.raystart, "stop", lambda: stopped.append(True))
    monkeypatch.setattr(sys.modules["ray"], "remote", lambda **kw: stopped.append(kw) or remote(**kw))
    fake([["backend=inline", "seed=0"]])
    assert stopped == [{"max_retries": 0}, True]
