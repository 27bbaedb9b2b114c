"""The runtime's pieces one at a time, without Ray: the warm pool and dataset a sweep keeps, starting and
stopping the local Ray, the pool's size and fit, reply buffers at their edges, and which mapped pages a worker
releases."""
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fixtures_workers import attached_workers

from fl.rounds import plain
from fl.runtime import memory, raystart, transport, warm
from fl.runtime.pool import InlinePool, _check_fits, _running, pool_size
from fl.runtime.transport import ReplyBuffer, ReplyReader


def cfg(backend="ray", device="cpu", num_workers=None, cpus=1.0, gpus=0.0, address=None, clients_per_round=10):
    return SimpleNamespace(backend=backend, device=device, fl=SimpleNamespace(clients_per_round=clients_per_round),
                           ray=SimpleNamespace(num_workers=num_workers, num_cpus_per_worker=cpus,
                                               num_gpus_per_worker=gpus, address=address,
                                               call_timeout_s=None))


# --- the warm pool and dataset (fl.runtime.warm) ------------------------------------------------


class FakePool:
    def __init__(self, fails=False):
        self.closed, self.dead, self.fails = False, set(), fails

    def close(self):
        self.closed = True
        if self.fails:
            raise RuntimeError("Ray is already shut down")


@pytest.fixture
def sweep(monkeypatch):
    """A fresh warm module state; Ray's stop and the exit hook recorded, never run."""
    stops, hooks = [], []
    monkeypatch.setattr(warm, "_pool", None)
    monkeypatch.setattr(warm, "_pool_key", None)
    monkeypatch.setattr(warm, "_data", None)
    monkeypatch.setattr(warm, "_data_key", None)
    monkeypatch.setattr(warm, "_exit_hook", False)
    monkeypatch.setattr(warm.raystart, "stop", lambda: stops.append("stop"))
    monkeypatch.setattr(warm.atexit, "register", hooks.append)
    return SimpleNamespace(stops=stops, hooks=hooks)


@pytest.mark.parametrize("other", [dict(address="ray://head:10001"), dict(gpus=0.5), dict(cpus=0.5),
                                   dict(device="cuda"), dict(backend="inline")])
def test_the_warm_pool_serves_a_cell_of_its_shape_and_is_replaced_for_any_other(sweep, other):
    """A cell on another Ray (ray.address), or wanting GPUs its workers lack, must not be given the old pool."""
    first = warm.pool(cfg(), 2, FakePool)
    assert warm.pool(cfg(), 2, FakePool) is first and not first.closed
    second = warm.pool(cfg(**other), 2, FakePool)
    assert second is not first and first.closed
    third = warm.pool(cfg(**other), 3, FakePool)  # another size
    assert third is not second and second.closed


def test_a_warm_pool_with_a_dead_worker_is_not_served_again(sweep):
    first = warm.pool(cfg(), 2, FakePool)
    first.dead.add(1)
    second = warm.pool(cfg(), 2, FakePool)
    assert second is not first and first.closed


def test_the_kept_dataset_is_reloaded_for_another_seed_or_dataset(sweep):
    loads = []

    def load(tag):
        return lambda: loads.append(tag) or tag

    digits = {"name": "digits", "partition": "iid"}
    assert warm.dataset(digits, 0, load("a")) == "a"
    assert warm.dataset(dict(digits), 0, load("b")) == "a"  # the same dataset and seed: kept
    assert warm.dataset(digits, 1, load("c")) == "c"  # another seed draws another split
    assert warm.dataset({**digits, "partition": "shards"}, 1, load("d")) == "d"
    assert loads == ["a", "c", "d"]


def test_discarding_a_pool_whose_close_fails_forgets_it_and_raises_nothing(sweep):
    """At exit Ray's own hook may have shut Ray down first: closing the pool then fails, and must not raise."""
    broken = warm.pool(cfg(), 2, lambda: FakePool(fails=True))
    warm.discard()
    assert broken.closed and warm._pool is None
    assert warm.pool(cfg(), 2, FakePool) is not broken


def test_close_ends_the_pool_the_dataset_and_the_ray_of_the_sweep(sweep):
    pool = warm.pool(cfg(), 2, FakePool)
    warm.dataset({"name": "digits"}, 0, lambda: "arrays")
    warm.close()
    assert pool.closed and warm._pool is None and sweep.stops == ["stop"]
    assert warm.dataset({"name": "digits"}, 0, lambda: "fresh") == "fresh"  # nothing kept past the sweep


def test_keep_registers_close_at_exit_once(sweep):
    warm.keep()
    warm.keep()
    assert sweep.hooks == [warm.close]


# --- starting and stopping the local Ray (fl.runtime.raystart) ----------------------------------


@pytest.fixture
def fake_ray(monkeypatch):
    calls, state = [], {"up": False, "mode": 0}

    def init(address=None, **kw):
        calls.append(("init", address, sorted(kw)))
        state["up"] = True

    fake = SimpleNamespace(is_initialized=lambda: state["up"], init=init,
                           shutdown=lambda: (calls.append(("shutdown",)), state.update(up=False)),
                           SCRIPT_MODE=0, WORKER_MODE=1,
                           get_runtime_context=lambda: SimpleNamespace(worker=SimpleNamespace(mode=state["mode"])))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(raystart, "_owned", False)
    monkeypatch.setattr(raystart, "_address", None)
    monkeypatch.setattr(raystart, "_workers_import_project", lambda: None)
    monkeypatch.setattr(raystart, "_stop_autoscaler_monitor", lambda ray: calls.append(("monitor",)))
    return SimpleNamespace(calls=calls, state=state)


def test_stop_shuts_down_only_the_ray_started_here_and_only_once(fake_ray):
    raystart.start(None)
    raystart.stop()
    assert fake_ray.calls[-1] == ("shutdown",)
    fake_ray.state["up"] = True  # the caller starts a Ray of its own afterwards
    raystart.stop()
    assert fake_ray.calls.count(("shutdown",)) == 1 and fake_ray.state["up"]


def test_a_local_ray_gets_its_cores_and_settings_and_a_cluster_is_joined_as_it_is(fake_ray):
    """ray.init refuses num_cpus and _system_config when it connects to a running cluster."""
    raystart.start(None)
    assert fake_ray.calls[0] == ("init", "local", ["_system_config", "configure_logging", "include_dashboard",
                                                "log_to_driver", "num_cpus"])
    assert fake_ray.calls[1] == ("monitor",)
    raystart.stop()
    raystart.start("auto")
    assert fake_ray.calls[-1] == ("init", "auto", ["configure_logging", "include_dashboard", "log_to_driver"])


def test_an_empty_address_is_a_local_ray_and_the_next_cell_giving_it_again_keeps_that_ray(fake_ray):
    """ray.address may be "" as well as null: both start a local Ray, which a sweep's next cell keeps."""
    raystart.start("")
    raystart.start("")
    raystart.start(None)
    assert [call[:2] for call in fake_ray.calls] == [("init", "local"), ("monitor",)]


def test_only_a_local_ray_is_given_this_checkout_for_its_workers_to_import(fake_ray, monkeypatch):
    imported = []
    monkeypatch.setattr(raystart, "_workers_import_project", lambda: imported.append(True))
    raystart.start("auto")  # a cluster's workers have their own environment
    raystart.stop()
    assert imported == []
    raystart.start(None)
    assert imported == [True]


def test_this_checkout_goes_first_on_the_workers_path_once(monkeypatch):
    root = str(Path(raystart.__file__).resolve().parents[2])  # the checkout holding fl/runtime/raystart.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", ""]))
    raystart._workers_import_project()
    raystart._workers_import_project()
    assert os.environ["PYTHONPATH"] == os.pathsep.join([root, "/elsewhere"])


def test_a_driver_is_not_a_ray_worker(fake_ray):
    assert not raystart.in_ray_worker()  # Ray not started
    fake_ray.state["up"] = True
    assert not raystart.in_ray_worker()  # the driver of a running Ray
    fake_ray.state["mode"] = 1
    assert raystart.in_ray_worker()


# --- the pool -----------------------------------------------------------------------------------


def test_the_pool_is_never_larger_than_the_cohort_and_defaults_to_the_usable_cores(monkeypatch):
    monkeypatch.setattr("fl.runtime.pool.usable_cpus", lambda: 6)
    assert pool_size(cfg(num_workers=8, clients_per_round=3)) == 3
    assert pool_size(cfg(num_workers=None, clients_per_round=10)) == 6
    assert pool_size(cfg(num_workers=None, clients_per_round=4)) == 4
    assert pool_size(cfg(num_workers=2, clients_per_round=10)) == 2


def test_a_pool_that_fits_up_to_rounding_is_not_refused():
    """25 x 0.28 is 7.000000000000001 in floating point: a 7-core Ray holds them."""
    _check_fits({"CPU": 7.0}, 25, 0.28, 0.0)
    _check_fits({"CPU": 25.0, "GPU": 7.0}, 25, 1.0, 0.28)


@pytest.mark.parametrize("cpus,size", [(2.0, 3), (1.0, 3), (5.0, 7), (0.5, 6)])
def test_the_share_a_refusal_suggests_fits_the_ray(cpus, size):
    """The suggested share is rounded down: 2 CPUs for 3 workers is 0.666 each, as 0.667 would need 2.001."""
    import re

    from fl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _check_fits({"CPU": cpus}, size, 1.0, 0.0)
    share = float(re.search(r"set ray.num_cpus_per_worker=([0-9.e-]+) to share them", str(err.value)).group(1))
    assert 0 < share * size <= cpus
    _check_fits({"CPU": cpus}, size, share, 0.0)


def _shrinking_ray(monkeypatch, cpus: float, starts_after: int):
    """A Ray of `cpus` CPUs whose fresh actors are attached after `starts_after` waits of a second (never if < 0)."""
    state = {"CPU": cpus, "waits": 0}

    def wait(refs, num_returns, timeout):
        state["waits"] += 1
        assert state["waits"] < 20, "waited for ever for a worker that cannot start"
        started = 0 <= starts_after < state["waits"]
        return (refs, []) if started else ([], refs)

    actor = SimpleNamespace(remote=lambda device, w: SimpleNamespace(
        attach=SimpleNamespace(remote=lambda *a: f"ref{w}")))
    fake = SimpleNamespace(is_initialized=lambda: True, cluster_resources=lambda: {"CPU": state["CPU"]},
                           remote=lambda **kw: lambda cls: actor, wait=wait)
    monkeypatch.setitem(sys.modules, "ray", fake)
    return state


def test_a_dead_worker_that_can_no_longer_start_fails_the_run_rather_than_hanging_it(monkeypatch):
    """A node of a Ray cluster lost mid-run takes its worker and its CPUs: the worker's replacement could never
    start, and the run waited for it for ever, silently (with ray.call_timeout_s too)."""
    from fl.runtime.pool import RayPool

    ray = _shrinking_ray(monkeypatch, 3.0, starts_after=-1)
    pool = RayPool("cpu", 3, 1.0, 0.0)
    pool._data = pool._plan = "attached"
    pool.dead, ray["CPU"] = {2}, 2.0  # the node that held worker 2 is gone
    with pytest.raises(RuntimeError, match=r"dead workers cannot be replaced, as the Ray has shrunk .*needs 3 CPUs "
                                           r"and this Ray has 2"):
        pool.revive()


def test_a_warm_pool_whose_dead_worker_can_no_longer_start_fails_the_next_cell_rather_than_hanging_it(monkeypatch):
    """Attached again for a sweep's next cell, the pool finds worker 2 dead with its node: its replacement could
    never start, and the cell must fail saying why."""
    from fl.runtime.pool import RayPool

    class Died(Exception):
        pass

    def get(ref):
        if ref == "gone":
            raise Died

    ray = _shrinking_ray(monkeypatch, 3.0, starts_after=-1)
    fake = sys.modules["ray"]
    fake.put, fake.get, fake.exceptions = (lambda value: value), get, SimpleNamespace(RayActorError=Died)
    pool = RayPool("cpu", 3, 1.0, 0.0)
    pool._probed = True  # the first cell probed the reply buffers
    pool.workers[2] = SimpleNamespace(attach=SimpleNamespace(remote=lambda *a: "gone"))
    ray["CPU"] = 2.0
    with pytest.raises(RuntimeError, match=r"dead workers cannot be replaced, as the Ray has shrunk"):
        pool.attach("data", "plan")


def test_a_warm_pool_puts_a_kept_dataset_once_and_replaces_a_worker_that_died_between_cells(monkeypatch):
    """Each cell's plan is put; the dataset only when the cell has another (fl.runtime.warm keeps it). A worker
    found dead at attach is replaced before the cell starts, and the new run's server is not told of it (it
    knows no worker's model yet). The reply buffers are probed at the first cell only."""
    from fl.runtime.pool import RayPool

    class Died(Exception):
        pass

    def get(ref):
        if ref == "gone":
            raise Died
        return ref

    _shrinking_ray(monkeypatch, 2.0, starts_after=0)
    fake, puts = sys.modules["ray"], []
    fake.put, fake.get = (lambda value: puts.append(value) or f"stored {len(puts)}"), get
    fake.exceptions = SimpleNamespace(RayActorError=Died)
    pool = RayPool("cpu", 2, 1.0, 0.0)
    probes = []
    pool._share_replies = lambda: probes.append(True)
    data, other = ["a dataset"], ["another dataset"]
    pool.attach(data, "plan 1")
    gone = pool.workers[1] = SimpleNamespace(attach=SimpleNamespace(remote=lambda *a: "gone"))
    pool.attach(data, "plan 2")
    pool.attach(other, "plan 3")
    assert puts == [data, "plan 1", "plan 2", other, "plan 3"] and probes == [True]
    assert pool.workers[1] is not gone and not pool.dead and pool.revive() == []


def test_only_data_over_the_inline_limit_goes_through_the_object_store(monkeypatch):
    """Small broadcasts and weights travel inside each call; a large one is put once and read by every worker."""
    from fl.runtime.pool import INLINE_BROADCAST_BYTES, RayPool

    _shrinking_ray(monkeypatch, 1.0, starts_after=0)
    sys.modules["ray"].put = lambda value: ("stored", len(value))
    pool = RayPool("cpu", 1, 1.0, 0.0)
    small = np.zeros(INLINE_BROADCAST_BYTES // 4, np.float32)
    large = np.zeros(small.size + 1, np.float32)
    assert pool.put(small) is small and pool.put(large) == ("stored", large.size)
    message = bytes(INLINE_BROADCAST_BYTES)
    assert pool.put(message) is message and pool.put(message + b"x") == ("stored", INLINE_BROADCAST_BYTES + 1)


def test_a_dead_worker_is_replaced_once_its_fresh_actor_has_started(monkeypatch):
    from fl.runtime.pool import RayPool

    ray = _shrinking_ray(monkeypatch, 3.0, starts_after=3)  # torch's import in the fresh actor
    pool = RayPool("cpu", 3, 1.0, 0.0)
    pool._data = pool._plan = "attached"
    pool.dead = {2}
    assert pool.revive() == [2] and ray["waits"] == 4


def test_a_runs_own_ray_pool_kills_a_worker_silent_for_the_call_timeout_it_was_given(monkeypatch):
    """A run's own pool (not a sweep's warm one) must wait for a reply only as long as ray.call_timeout_s says."""
    from fl.runtime.pool import make_pool

    _shrinking_ray(monkeypatch, 3.0, starts_after=0)
    run = cfg(num_workers=3)
    run.ray.call_timeout_s = 30.0
    assert make_pool(run).timeout == 30.0


def test_an_inline_pool_gives_back_the_callers_torch_threads_when_it_closes():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pool = InlinePool("cpu", 1)
        assert torch.get_num_threads() == 1  # a worker computes on one thread
        pool.close()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_an_exited_process_and_a_zombie_are_not_running():
    assert _running(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(6000):  # until it has exited, not yet reaped: a zombie (a guard, not a time limit)
        if open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    else:
        pytest.fail(f"process {child.pid} ('python -c pass') did not exit")
    assert not _running(child.pid)
    child.wait()
    assert not _running(child.pid)


# --- the worker ---------------------------------------------------------------------------------


def test_a_worker_attached_again_keeps_replying_through_the_buffer_the_driver_mapped(tmp_path, monkeypatch):
    """A warm pool probes its workers' buffers once: the next cell's replies must come through the same one."""
    from fl.data import load_dataset
    from fl.server import Broadcaster

    monkeypatch.setattr(transport, "SHM_DIR", str(tmp_path))
    monkeypatch.setattr(transport.ReplyBuffer.__init__, "__defaults__", (str(tmp_path),))
    config, plan, [w] = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=4",
                                          "fl.clients_per_round=4"])
    reader = ReplyReader()
    try:
        probe, _ = w.probe_replies(b"token")
        assert reader.attach(0, probe, b"token")
        w.attach(load_dataset(config.dataset, config.seed), plan)  # the next cell
        broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
        packed, _ = w.run(plain.client_round, broadcast, 0, [0, 1], None, {}, packed=True)
        plain_reply, _ = w.run(plain.client_round, broadcast, 0, [0, 1], None, {})
        assert reader.unpack(0, packed) == plain_reply
    finally:
        w.close_replies()
        reader.close()
    assert os.listdir(tmp_path) == []


def test_a_plan_for_another_model_is_refused_at_attach():
    from fl.data import load_dataset
    from fl.plan import Plan

    config, plan, [w] = attached_workers(["model=mlp_small", "secagg=none"])
    other = Plan.build(config, [10, 20])
    with pytest.raises(ValueError, match="the plan is for 30 parameters"):
        w.attach(load_dataset(config.dataset, config.seed), other)


# --- reply buffers (fl.runtime.transport) -------------------------------------------------------


def test_a_reply_that_fills_the_buffer_exactly_fits_and_one_byte_more_grows_it(tmp_path):
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    assert reader.attach(0, buffer.pack([(0, b"t")]), b"t")
    first = buffer.path
    exact = [(0, b"a" * (transport.INITIAL_BYTES - 1)), (1, b"b")]
    assert reader.unpack(0, buffer.pack(exact)) == exact and buffer.path == first
    more = [(0, b"a" * transport.INITIAL_BYTES), (1, b"b")]
    assert reader.unpack(0, buffer.pack(more)) == more and buffer.path != first
    buffer.close()
    reader.close()


def test_a_buffer_that_must_grow_at_least_doubles(tmp_path):
    """Replies that grow a little at each call make a new file (and a new mapping for the driver) only every
    doubling, not at each call."""
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    assert reader.attach(0, buffer.pack([(0, b"t")]), b"t")
    out = [(0, b"a" * (transport.INITIAL_BYTES + 1))]
    assert reader.unpack(0, buffer.pack(out)) == out and len(buffer.map) == 2 * transport.INITIAL_BYTES
    buffer.close()
    reader.close()


def test_a_reply_more_than_twice_the_buffer_grows_it_to_fit(tmp_path):
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    assert reader.attach(0, buffer.pack([(0, b"t")]), b"t")
    out = [(0, os.urandom(3 * transport.INITIAL_BYTES)), (1, None), (2, b"x")]
    assert reader.unpack(0, buffer.pack(out)) == out
    buffer.close()
    reader.close()


# --- released pages (fl.runtime.memory) ---------------------------------------------------------


def smaps(monkeypatch, text):
    monkeypatch.setattr(memory, "open", lambda path: io.StringIO(text), raising=False)


def mapping(start, name, rss=4, **dirty):
    fields = {"Rss": rss, "Private_Dirty": 0, "Shared_Dirty": 0, "Anonymous": 0, "Swap": 0, **dirty}
    return (f"{start:x}-{start + 0x1000:x} r-xp 00000000 08:01 1 {name}\n" +
            "".join(f"{key}:{value:>20} kB\n" for key, value in fields.items()))


@pytest.mark.parametrize("dirty", ["Private_Dirty", "Shared_Dirty"])
def test_a_mapping_with_dirty_pages_is_not_clean(monkeypatch, dirty):
    smaps(monkeypatch, mapping(0x7f0000000000, "/usr/lib/libtorch_cuda.so", **{dirty: 4}) +
          mapping(0x7f0000002000, "/usr/lib/libtorch_cuda.so"))
    assert memory.clean_mappings() == [(0x7f0000002000, 0x7f0000003000, 4096)]


def test_the_lines_of_another_mapping_are_not_counted_for_the_gpu_library_before_it(monkeypatch):
    """A clean GPU mapping followed by a dirty anonymous one: the anonymous one's lines are its own."""
    smaps(monkeypatch, mapping(0x7f0000000000, "/usr/lib/python3/site-packages/nvidia/cublas/libcublasLt.so") +
          mapping(0x7f0000002000, "", rss=64, Anonymous=64, Private_Dirty=64) +
          mapping(0x7f0000004000, "/usr/lib/libc.so.6", rss=8, Private_Dirty=8))
    assert memory.clean_mappings() == [(0x7f0000000000, 0x7f0000001000, 4096)]


def test_only_the_pages_madvise_dropped_count_as_released(monkeypatch):
    """madvise fails (-1) for a range it cannot drop: those pages are still resident, not released."""
    calls = []

    def madvise(start, length, advice):
        calls.append((start, length, advice))
        return 0 if start == 0x7f0000000000 else -1

    monkeypatch.setattr(memory.ctypes, "CDLL", lambda *args, **kwargs: SimpleNamespace(madvise=madvise))
    smaps(monkeypatch, mapping(0x7f0000000000, "/usr/lib/libtorch_cuda.so", rss=4) +
          mapping(0x7f0000002000, "/usr/lib/libtorch_cuda.so", rss=8))
    assert memory.release_gpu_libraries() == 4096
    assert calls == [(0x7f0000000000, 0x1000, memory.MADV_DONTNEED), (0x7f0000002000, 0x1000, memory.MADV_DONTNEED)]


def test_the_import_hook_releases_once_torch_has_loaded_and_then_leaves(monkeypatch):
    released = []
    monkeypatch.setattr(memory, "release_gpu_libraries", lambda: released.append(1))
    hook = memory._ReleaseWhenTorchCLoads()
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    monkeypatch.setitem(sys.modules, "torch._C", sys.modules.get("torch._C", object()))
    assert hook.find_spec("anything") is None
    assert hook not in sys.meta_path and released == [1]
