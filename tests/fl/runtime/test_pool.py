"""The worker pool: a dead Ray worker answers None, is replaced, and replies through Ray."""
import time

import numpy as np

import fl
from fl.rounds import plain


def test_a_dead_ray_worker_answers_none_and_is_replaced(ray_session):
    from fl.data import load_dataset
    from fl.models import build_model
    from fl.plan import Plan
    from fl.runtime.pool import RayPool
    from fl.server import Broadcaster

    config = fl.config.validate(fl.compose(["model=mlp_small", "secagg=none"]))
    data = load_dataset(config.dataset, config.seed)
    plan = Plan.build(config, [p.numel() for p in build_model(config.model, (64,), 10).parameters()])
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    nobody = (broadcast, 0, [], None)  # a round's step for no client: only the worker's timings come back
    pool = RayPool("cpu", 2, 1.0, 0.0)
    try:
        pool.attach(data, plan)
        assert set(pool._shared) == {0, 1}  # both reply through shared memory (fl.runtime.transport)
        ray_session.kill(pool.workers[0])
        for _ in range(200):  # ray.kill is asynchronous: wait until the actor is really gone
            try:
                ray_session.get(pool.workers[0].stats.remote())
            except ray_session.exceptions.RayActorError:
                break
            time.sleep(0.05)
        replies = pool.call(plain.client_round, {0: nobody, 1: nobody})
        assert replies[0] is None and replies[1] == ([], replies[1][1]) and replies[1][1]["state_bytes"] == 0
        pool.dead.clear()
        streamed = pool.stream(plain.client_round, {0: (b"", 0, [0], None)})  # a streaming call to the dead actor
        assert list(streamed[0]) == [None] and pool.dead == {0}
        assert pool.revive() == [0]
        assert pool.call(plain.client_round, {0: nobody})[0] is not None
        assert set(pool._shared) == {1}  # the fresh actor replies through Ray
    finally:
        pool.close()
