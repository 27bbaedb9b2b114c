"""A worker runs a client step for its clients: whole, or streamed in chunks of messages then its timings."""
import numpy as np
from fixtures_workers import attached_workers

from fl.rounds import plain


def test_a_worker_streams_its_messages_in_chunks_then_its_timings_and_a_whole_run_is_the_same():
    from fl.server import Broadcaster

    config, plan, workers = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=6",
                                              "fl.clients_per_round=6"], 2)
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    first = workers[0].run(plain.client_round, broadcast, 0, [0], None, {})[0][0][1]
    message_size = len(first)
    items = list(workers[1].stream(plain.client_round, broadcast, 0, [0, 2, 4], None, {}, chunk_bytes=2 * message_size))
    assert [len(chunk) for chunk in items[:-1]] == [2, 1] and isinstance(items[-1], dict)
    assert items[-1]["t_train"] > 0
    streamed = [m for chunk in items[:-1] for m in chunk]
    assert [cid for cid, _ in streamed] == [0, 2, 4]
    assert streamed[0][1] == first  # the same bytes either way


def test_a_warm_worker_freezes_once_and_releases_each_last_cell_when_attached_again(monkeypatch):
    """In a Ray worker the first attach freezes what the process keeps (torch, the first cell); a warm pool's
    later cells stay collectable (no unfreeze and full collection of torch's objects at every cell), and each
    re-attach releases the last cell's model, frozen or not."""
    import gc
    import weakref

    import fl.runtime.worker as worker_module
    from fl.data import load_dataset

    monkeypatch.setattr(worker_module, "_in_ray_worker", lambda: True)
    monkeypatch.setattr(worker_module, "_frozen", False)
    try:
        cfg, plan, [w] = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=4",
                                           "fl.clients_per_round=4"])
        first = weakref.ref(w.model)
        assert worker_module._frozen and not any(o is w.model for o in gc.get_objects())  # out of every collection
        data = load_dataset(cfg.dataset, cfg.seed)
        w.attach(data, plan)
        second = weakref.ref(w.model)
        assert first() is None  # released by reference counting although it was frozen
        assert any(o is w.model for o in gc.get_objects())  # not frozen: collectable like any object
        w.attach(data, plan)
        assert second() is None and worker_module._frozen
        # a ray_cells task process runs each inline cell's pool in new Workers: they freeze nothing more
        frozen = gc.get_freeze_count()
        _, _, [again] = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=4",
                                          "fl.clients_per_round=4"])
        assert gc.get_freeze_count() <= frozen and any(o is again.model for o in gc.get_objects())
    finally:
        gc.unfreeze()
