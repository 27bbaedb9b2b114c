"""The worker pool: a dead Ray worker answers None, is replaced, and replies through Ray."""
import time

import numpy as np
import pytest

import fl
from fl.rounds import plain


def _digits_plan():
    from fl.data import load_dataset
    from fl.models import build_model
    from fl.plan import Plan

    from fl.config import validate

    config = validate(fl.compose(["model=mlp_small", "secagg=none"]))
    data = load_dataset(config.dataset, config.seed)
    return data, Plan.build(config, [p.numel() for p in build_model(config.model, (64,), 10).parameters()])


def _kill(ray, actor):
    ray.kill(actor)
    for _ in range(200):  # ray.kill is asynchronous: wait until the actor is really gone
        try:
            ray.get(actor.stats.remote())
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)


def _evaluated_inline(data, plan, weights, workers: int):
    """Accuracy and loss as workers in this process give them: what a Ray pool gives, whichever of its workers die."""
    from fl.runtime.pool import InlinePool
    from fl.simulation import Evaluator

    inline = InlinePool("cpu", workers)
    try:
        inline.attach(data, plan)
        return Evaluator(inline, workers, len(data.y_test))(weights)
    finally:
        inline.close()


def test_the_test_split_of_a_dead_ray_worker_is_evaluated_by_a_live_one(ray_session):
    """Digits' test split is one batch, so worker 0 alone evaluates it: when it dies, worker 1 must."""
    from fl.runtime.pool import RayPool
    from fl.simulation import Evaluator

    data, plan = _digits_plan()
    weights = np.random.default_rng(0).normal(0, 0.1, plan.length).astype(np.float32)
    expected = _evaluated_inline(data, plan, weights, 2)
    pool = RayPool("cpu", 2, 1.0, 0.0)
    try:
        pool.attach(data, plan)
        evaluator = Evaluator(pool, 2, len(data.y_test))
        assert list(evaluator.ranges) == [0]
        _kill(ray_session, pool.workers[0])
        assert evaluator(weights) == expected and pool.dead == {0}
    finally:
        pool.close()


def test_a_pool_whose_every_worker_died_evaluates_on_a_fresh_one_and_reports_it_at_the_next_revive(ray_session):
    """ray.num_workers=1 (or every worker dead at once): the death, survived as a dropout with two workers, failed
    the run with "every worker died while evaluating the model". The server must still catch the fresh one up."""
    from fl.runtime.pool import RayPool
    from fl.simulation import Evaluator

    data, plan = _digits_plan()
    weights = np.random.default_rng(0).normal(0, 0.1, plan.length).astype(np.float32)
    expected = _evaluated_inline(data, plan, weights, 1)
    pool = RayPool("cpu", 1, 1.0, 0.0)
    try:
        pool.attach(data, plan)
        evaluator = Evaluator(pool, 1, len(data.y_test))
        _kill(ray_session, pool.workers[0])
        assert evaluator(weights) == expected and pool.dead == set()
        assert pool.revive() == [0] and pool.revive() == []  # the round's start: the server forgets its model once
    finally:
        pool.close()


def test_an_evaluation_whose_fresh_workers_die_too_fails_the_run_with_a_clear_error():
    """A fresh worker is started once for an evaluation that found every worker dead: one that dies as well (a model
    that kills every process evaluating it) fails the run, rather than replacing workers for ever."""
    from fl.simulation import Evaluator

    class Dying:  # every worker dies in every evaluation
        def __init__(self):
            self.workers, self.dead, self.replaced = [object()], set(), 0

        def evaluate(self, calls):
            self.dead |= set(calls)
            return dict.fromkeys(calls)

        def replace_dead(self):
            self.replaced += 1
            assert self.replaced < 5, "replacing workers for ever"
            self.dead.clear()

    pool = Dying()
    with pytest.raises(RuntimeError, match="every worker died while evaluating the model, fresh ones too"):
        Evaluator(pool, 1, 100).evaluate_ranges("ref", {0: (0, 1)})
    assert pool.replaced == 1


def test_an_evaluation_that_outlasts_the_call_timeout_on_fresh_workers_too_names_the_timeout():
    """ray.call_timeout_s below an evaluation's seconds kills every worker, fresh ones too: the run failed saying
    only that every worker died, and its failed-*.txt kept no trace of the kills."""
    from fl.simulation import Evaluator

    class Hung:  # every worker is killed in every evaluation
        timeout = 0.01

        def __init__(self):
            self.workers, self.dead = [object()], set()

        def evaluate(self, calls):
            self.dead |= set(calls)
            return dict.fromkeys(calls)

        def replace_dead(self):
            self.dead.clear()

    with pytest.raises(RuntimeError, match=r"fresh ones too, or sent nothing for ray.call_timeout_s=0.01 s: set it "
                                           r"above an evaluation's seconds"):
        Evaluator(Hung(), 1, 100).evaluate_ranges("ref", {0: (0, 1)})


def test_a_dead_ray_worker_answers_none_and_is_replaced(ray_session):
    from fl.runtime.pool import RayPool
    from fl.server import Broadcaster

    data, plan = _digits_plan()
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    nobody = (broadcast, 0, [], None, {})  # a round's step for no client: only the worker's timings come back
    pool = RayPool("cpu", 2, 1.0, 0.0)
    try:
        pool.attach(data, plan)
        assert set(pool._shared) == {0, 1}  # both reply through shared memory (fl.runtime.transport)
        _kill(ray_session, pool.workers[0])
        replies = pool.call(plain.client_round, {0: nobody, 1: nobody})
        assert replies[0] is None and replies[1] == ([], replies[1][1]) and replies[1][1]["state_bytes"] == 0
        pool.dead.clear()
        streamed = pool.stream(plain.client_round, {0: (b"", 0, [0], None, {})})  # a streaming call to the dead actor
        assert list(streamed[0]) == [None] and pool.dead == {0}
        assert pool.revive() == [0]
        assert pool.call(plain.client_round, {0: nobody})[0] is not None
        assert set(pool._shared) == {1}  # the fresh actor replies through Ray
    finally:
        pool.close()


class _LateRay:
    """Ray, but each wait reports the replies late once they have landed: a reply that arrives while the driver,
    its timeout past, kills the worker (`ray.kill` is asynchronous)."""

    def __init__(self, ray):
        self._real = ray

    def __getattr__(self, name):
        return getattr(self._real, name)

    def wait(self, refs, num_returns=1, timeout=None):
        self._real.wait(refs, num_returns=len(refs))
        return [], list(refs)


def test_a_worker_silent_past_the_call_timeout_is_killed_its_clients_dropped_and_replaced(ray_session, capsys):
    """A hung worker (here a step that sleeps) hung the whole run: the driver waited on it for ever. A reply that
    lands as its worker is killed was used and the worker not marked dead: its clients were dropped a round late, and
    a kill in the last round was never replaced or reported."""
    from fl.runtime.pool import RayPool

    def step(worker, seconds, t):  # defined here, so Ray ships it by value
        time.sleep(seconds)
        yield from ()

    data, plan = _digits_plan()
    pool = RayPool("cpu", 2, 1.0, 0.0, timeout=1.0)
    try:
        pool.attach(data, plan)
        assert pool.call(step, {0: (0,), 1: (0,)}) == {0: ([], {}), 1: ([], {})}  # answered in time: kept
        assert {w: list(s) for w, s in pool.stream(step, {0: (0,), 1: (0,)}).items()} == {0: [{}], 1: [{}]}
        assert pool.dead == set()
        assert pool.call(step, {0: (60,), 1: (0,)}) == {0: None, 1: ([], {})} and pool.dead == {0}
        assert "worker 0 sent nothing for 1 s (ray.call_timeout_s): killed" in capsys.readouterr().out
        assert pool.revive() == [0] and pool.call(step, {0: (0,)}) == {0: ([], {})}  # the fresh one answers
        streamed = pool.stream(step, {0: (0,), 1: (60,)})
        assert list(streamed[0]) == [{}] and list(streamed[1]) == [None] and pool.dead == {1}
        assert pool.revive() == [1]
        assert pool.call(step, {0: (0,), 1: (0,)}) == {0: ([], {}), 1: ([], {})}
        pool._ray = _LateRay(ray_session)
        assert pool.call(step, {0: (0,)}) == {0: None} and pool.dead == {0}
        assert list(pool.stream(step, {1: (0,)})[1]) == [None] and pool.dead == {0, 1}
        pool._ray = ray_session
        assert pool.revive() == [0, 1]
        assert pool.call(step, {0: (0,), 1: (0,)}) == {0: ([], {}), 1: ([], {})}
    finally:
        pool._ray = ray_session
        pool.close()


def test_a_fresh_worker_started_mid_round_for_an_evaluation_is_not_timed_while_it_starts(ray_session):
    """ray.num_workers=1 and its worker hung while evaluating: it is killed, and the fresh one that takes its batches
    must not be killed too for its start-up (torch's import, the data), longer than the call timeout here: the run
    failed with "every worker died while evaluating the model, fresh ones too"."""
    import os
    import signal

    from fl.runtime.pool import RayPool
    from fl.simulation import Evaluator

    data, plan = _digits_plan()
    weights = np.random.default_rng(0).normal(0, 0.1, plan.length).astype(np.float32)
    expected = _evaluated_inline(data, plan, weights, 1)
    pool = RayPool("cpu", 1, 1.0, 0.0, timeout=0.5)
    try:
        pool.attach(data, plan)
        evaluator = Evaluator(pool, 1, len(data.y_test))
        os.kill(pool._shared[0], signal.SIGSTOP)  # hung: alive, silent
        assert evaluator(weights) == expected and pool.revive() == [0]
    finally:
        pool.close()


def test_a_pool_larger_than_the_ray_is_refused_before_any_work(ray_session, tmp_path):
    """More workers than the Ray's cores (each of ray.num_cpus_per_worker=1) used to wait forever for the actors
    that could not start; now the run is refused before any actor starts, and writes nothing."""
    from fl.config import ConfigError

    cores = int(ray_session.cluster_resources()["CPU"])
    many = [f"fl.num_clients={cores + 1}", f"fl.clients_per_round={cores + 1}", f"ray.num_workers={cores + 1}",
            "model=mlp_small", "fl.rounds=1", "backend=ray", f"results.dir={tmp_path}"]
    with pytest.raises(ConfigError, match=rf"pool of {cores + 1} workers .* this Ray has {cores}, so some workers "
                                          rf"could never start: set ray.num_cpus_per_worker="):
        fl.run(fl.compose(many))
    with pytest.raises(ConfigError, match="needs 1 GPUs and this Ray has 0"):
        fl.run(fl.compose([*many[:2], "ray.num_workers=1", "ray.num_gpus_per_worker=1", *many[3:]]))
    assert not any(tmp_path.iterdir())
    rows = fl.run(fl.compose([*many[3:], "ray.num_workers=2", "ray.num_cpus_per_worker=0.5"]))  # a share runs
    assert list(rows["num_workers"]) == [2]


def test_the_refusal_names_the_share_of_the_cores_that_fits():
    from fl.errors import ConfigError
    from fl.runtime.pool import _check_fits

    with pytest.raises(ConfigError, match="needs 4 CPUs and this Ray has 2, .* set ray.num_cpus_per_worker=0.5 to "
                                          "share them, or lower ray.num_workers"):
        _check_fits({"CPU": 2.0}, 4, 1.0, 0.0)
    with pytest.raises(ConfigError, match="needs 3 CPUs and this Ray has 2, .*ray.num_cpus_per_worker=0.666 "):
        _check_fits({"CPU": 2.0}, 3, 1.0, 0.0)
    _check_fits({"CPU": 2.0}, 4, 0.5, 0.0)  # fits exactly
    _check_fits({"CPU": 2.0, "GPU": 1.0}, 4, 0.5, 0.25)
    with pytest.raises(ConfigError, match="needs 2 GPUs and this Ray has 1, .*ray.num_gpus_per_worker=0.25"):
        _check_fits({"CPU": 8.0, "GPU": 1.0}, 4, 1.0, 0.5)


def test_a_pool_asking_for_gpus_a_ray_without_any_is_told_to_ask_for_none():
    """With no GPU in the Ray no number of workers fits, so lowering ray.num_workers (the advice where some GPUs
    are there to share) would not help: the refusal says to reserve none."""
    from fl.errors import ConfigError
    from fl.runtime.pool import _check_fits

    with pytest.raises(ConfigError) as refusal:
        _check_fits({"CPU": 2.0}, 1, 1.0, 0.5)
    assert "set ray.num_gpus_per_worker=0 (and device=cpu)" in str(refusal.value)
    assert "lower ray.num_workers" not in str(refusal.value)


@pytest.mark.parametrize("dead", [0, 1])
def test_a_worker_that_died_between_two_cells_is_replaced_when_the_pool_is_attached_again(ray_session, dead):
    """A warm pool reused by the next cell: the death was seen only at attach, which raised ActorDiedError and
    failed the cell; worker 0 is asked for the cell's initial model before attach, which failed it the same way."""
    from fl.plan import model_section
    from fl.runtime.pool import RayPool
    from fl.server import Broadcaster

    data, plan = _digits_plan()
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    pool = RayPool("cpu", 2, 1.0, 0.0)
    try:
        pool.attach(data, plan)
        _kill(ray_session, pool.workers[dead])  # between the cells
        config = fl.compose(["model=mlp_small"])
        initial = pool.initial_model(model_section(config), data.input_shape, data.num_classes, 0, "cpu")
        assert tuple(initial["sizes"]) == plan.layer_sizes
        pool.attach(data, plan)  # the next cell
        assert pool.dead == set() and set(pool._shared) == {1 - dead}  # the fresh worker replies through Ray
        assert pool.revive() == []  # replaced before the new run's first round: its server has nothing to forget
        replies = pool.call(plain.client_round, {0: (broadcast, 0, [], None, {}), 1: (broadcast, 0, [], None, {})})
        assert replies[0] is not None and replies[1] is not None
    finally:
        pool.close()


def test_close_waits_for_its_workers_to_exit_before_removing_their_reply_buffers(ray_session):
    """ray.kill returns before the process ends: a worker still in a call could create a buffer after the driver
    had removed the leftovers, and it stayed in /dev/shm."""
    import os

    from fl.runtime import pool as pools

    data, plan = _digits_plan()
    pool = pools.RayPool("cpu", 2, 1.0, 0.0)
    pids = []
    try:
        pool.attach(data, plan)
        pids = list(pool._shared.values())
        assert len(pids) == 2 and all(pools._running(pid) for pid in pids)
    finally:
        pool.close()
    assert not any(pools._running(pid) for pid in pids)  # closed only once they were gone
    assert not [f for f in os.listdir("/dev/shm") if any(f.startswith(f"fedsqueeze-replies-{pid}-") for pid in pids)]
