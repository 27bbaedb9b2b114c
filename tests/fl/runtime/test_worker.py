"""A worker runs a client step for its clients: whole, or streamed in chunks of messages then its timings."""
import os

import numpy as np
import pytest
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


def test_a_worker_attached_again_lets_go_of_the_last_cells_data_before_it_takes_the_next(monkeypatch):
    """A warm pool's worker never holds two cells' training tensors at once (its peak is one cell's)."""
    import weakref

    import fl.runtime.worker as worker_module
    from fl.data import load_dataset

    cfg, plan, [w] = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=4",
                                       "fl.clients_per_round=4"])
    last = [weakref.ref(w.x), weakref.ref(w.y), weakref.ref(w.model)]
    held_at_load = []

    def as_tensor(*args, load=worker_module.as_tensor):
        held_at_load.append([ref() is not None for ref in last])
        return load(*args)

    monkeypatch.setattr(worker_module, "as_tensor", as_tensor)
    w.attach(load_dataset(cfg.dataset, cfg.seed), plan)
    assert held_at_load == [[False, False, False]] * 2


def test_a_clients_weight_is_relative_to_the_mean_clients_samples():
    """fl.rounds.masked weighs a client n / mean_samples: every training sample belongs to one client, so the mean
    client holds the training set's size over the number of clients."""
    _, plan, [w] = attached_workers(["model=mlp_small", "secagg=dh", "fl.num_clients=7", "fl.clients_per_round=7",
                                     "dataset.partition=dirichlet"])
    sizes = [len(part) for part in w.parts]
    assert len(sizes) == 7 and sum(sizes) == len(w.y)
    assert w.mean_samples == pytest.approx(sum(sizes) / 7)


def test_a_chunk_ends_with_the_message_that_brings_it_to_chunk_bytes_and_the_next_starts_empty():
    from fl.server import Broadcaster

    _, plan, workers = attached_workers(["model=mlp_small", "secagg=none", "compression=none", "fl.num_clients=6",
                                         "fl.clients_per_round=6"], 2)
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    whole = workers[0].run(plain.client_round, broadcast, 0, [0, 1, 2, 3, 4], None, {})[0]
    sizes = [len(message) for _, message in whole]
    exact = min(sizes[0] + sizes[1], sizes[2] + sizes[3])  # one of the two pairs fills a chunk exactly
    assert max(sizes) < exact  # dense updates: one message alone never does
    items = list(workers[1].stream(plain.client_round, broadcast, 0, [0, 1, 2, 3, 4], None, {}, chunk_bytes=exact))
    assert [[cid for cid, _ in chunk] for chunk in items[:-1]] == [[0, 1], [2, 3], [4]]


def test_a_worker_probed_again_removes_the_buffer_it_opened_before(tmp_path, monkeypatch):
    """A buffer the driver never mapped still has its name in shared memory: a second probe must not leave it."""
    from fl.runtime import transport
    from fl.runtime.worker import Worker

    monkeypatch.setattr(transport.ReplyBuffer.__init__, "__defaults__", (str(tmp_path),))
    w = Worker("cpu")
    w.probe_replies(b"first")
    w.probe_replies(b"second")
    assert os.listdir(tmp_path) == [os.path.basename(w.replies.path)]
    w.close_replies()
    assert os.listdir(tmp_path) == []
