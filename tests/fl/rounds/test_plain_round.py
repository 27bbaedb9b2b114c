"""The plain round: batches of trained clients encode to the same messages; the server sums only good updates."""
import types

import numpy as np
import pytest
from fixtures_workers import attached_workers

import compression
from fl import wire
from fl.rounds import plain
from fl.rounds.client import sync


def test_server_rejects_a_payload_with_nan_and_keeps_its_sum(tmp_path):
    from fl.rounds.plain import PlainAggregator

    agg = PlainAggregator(0, 4, compression.get("none")())
    good = np.array([1, 2, 3, 4], np.float32)
    agg.add(wire.encode_update(0, 0, "none", 4, 2.0, good.tobytes()), 0)
    bad = np.array([1, np.nan, 0, 0], np.float32).tobytes()
    with pytest.raises(ValueError, match="NaN"):
        agg.add(wire.encode_update(0, 1, "none", 4, 10.0, bad), 1)
    with pytest.raises(wire.WireError):
        agg.add(wire.encode_update(0, 2, "none", 4, 10.0, good.tobytes())[:-3], 2)  # truncated
    assert agg.weight == 2.0 and agg.rejected == 1
    assert agg.senders == {0: 2.0}  # fl.aggregation=memory adds a new sender's weight to its sum from these
    np.testing.assert_array_equal(agg.result(), good)  # only the good update, with its own weight


def _aggregator(codec, length=1000):
    from fl.rounds.plain import PlainAggregator, _payload_bound

    return PlainAggregator(3, length, codec, _payload_bound(codec, length))


def test_server_refuses_an_update_in_another_codec_than_the_rounds():
    # a payload that fits the round's size bound but names another registered codec is not decoded with it
    vector = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    agg = _aggregator(compression.get("topk")(0.1))
    other = compression.get("countsketch")(0.01, rows=64).encode(vector)
    assert len(other) <= agg.max_payload
    with pytest.raises(wire.WireError, match="codec 'countsketch', expected the round's 'topk'"):
        agg.add(wire.encode_update(3, 7, "countsketch", 1000, 1.0, other), 7)
    assert agg.weight == 0.0 and agg.result() is None


def test_server_refuses_a_count_sketch_of_other_rows_seed_or_k_before_building_its_hashes():
    from compression import countsketch

    vector = np.random.default_rng(1).normal(size=1000).astype(np.float32)
    ours = compression.get("countsketch")(0.1)
    agg = _aggregator(ours)
    others = [compression.get("countsketch")(0.1, rows=64), compression.get("countsketch")(0.1, seed=5),
              compression.get("countsketch")(0.1, cols_per_k=2.0), compression.get("countsketch")(0.05)]
    for cid, other in enumerate(others):
        payload = other.encode(vector)
        countsketch._hashes.cache_clear()
        with pytest.raises(compression.DecodeError, match="another sketch"):
            agg.add(wire.encode_update(3, cid, "countsketch", 1000, 1.0, payload), cid)
        assert countsketch._hashes.cache_info().currsize == 0  # refused from the header: no rows x n hashes built
    assert agg.rejected == len(others) and agg.result() is None
    agg.add(wire.encode_update(3, 9, "countsketch", 1000, 1.0, ours.encode(vector)), 9)
    np.testing.assert_array_equal(agg.result(), ours.decode(ours.encode(vector), 1000))


def test_server_refuses_a_rotation_of_another_seed_or_width_before_building_its_rotation():
    from compression import rotation

    vector = np.random.default_rng(2).normal(size=1000).astype(np.float32)
    ours = compression.get("rotation")(seed=3)
    agg = _aggregator(ours)
    others = [compression.get("rotation")(seed=4), compression.get("rotation")(seed=3, bits=4)]
    for cid, other in enumerate(others):
        payload = other.encode(vector)
        rotation._rotation.cache_clear()
        with pytest.raises(compression.DecodeError, match="another rotation"):
            agg.add(wire.encode_update(3, cid, "rotation", 1000, 1.0, payload), cid)
        assert rotation._rotation.cache_info().currsize == 0  # refused from the header: no signs drawn
    assert agg.rejected == len(others) and agg.result() is None
    agg.add(wire.encode_update(3, 9, "rotation", 1000, 1.0, ours.encode(vector)), 9)
    np.testing.assert_array_equal(agg.result(), ours.decode(ours.encode(vector), 1000))


def test_server_sums_each_client_once_and_only_under_its_own_id():
    vector = np.arange(8, dtype=np.float32)
    agg = _aggregator(compression.get("none")(), 8)
    message = wire.encode_update(3, 7, "none", 8, 1.0, vector.tobytes())
    agg.add(message, 7)
    with pytest.raises(wire.WireError, match="second update from client 7"):
        agg.add(message, 7)  # a repeated message is not summed twice
    with pytest.raises(wire.WireError, match="from client 7, but sent by client 8"):
        agg.add(message, 8)  # nor one client's message under another's name
    assert agg.weight == 1.0
    np.testing.assert_array_equal(agg.result(), vector)


def test_encoding_a_batch_of_trained_clients_sends_the_same_messages_and_residuals_as_one_at_a_time(monkeypatch):
    from fl.server import Broadcaster

    # top-k with error feedback: round 1's messages depend on the residuals that round 0 left per client
    config, plan, (one_at_a_time, batched) = attached_workers([
        "model=mlp_small", "secagg=none", "compression=topk", "compression.ratio=0.1", "fl.num_clients=6",
        "fl.clients_per_round=6"], 2)
    length = plan.length
    assert plan.error_feedback
    weights = np.zeros(length, np.float32)
    broadcaster = Broadcaster(plan)
    sizes = []
    encode = plain.encode_updates
    monkeypatch.setattr(plain, "encode_updates", lambda worker, trained, *a: sizes.append(len(trained)) or
                        encode(worker, trained, *a))
    for r in range(2):
        broadcast = broadcaster.encode(r, weights)
        monkeypatch.setattr(plain, "ENCODE_BATCH_BYTES", 1)  # one client a batch
        single, _ = one_at_a_time.run(plain.client_round, broadcast, r, list(range(6)), None, {})
        monkeypatch.setattr(plain, "ENCODE_BATCH_BYTES", 4 * length * 4)  # four clients, then two
        together, _ = batched.run(plain.client_round, broadcast, r, list(range(6)), None, {})
        assert single == together and all(m is not None for _, m in single)
        assert sizes == [1] * 6 + [4, 2]
        sizes.clear()
        for cid in range(6):
            np.testing.assert_array_equal(one_at_a_time.residuals[cid], batched.residuals[cid])
        weights += 0.01


def test_a_float16_residual_beyond_its_range_saturates_instead_of_shutting_the_client_out():
    """Stored as inf, it made every later corrected update non-finite: the client never sent again."""
    from types import SimpleNamespace

    from fl.rounds.client import keep_residual

    worker = SimpleNamespace(plan=SimpleNamespace(residual_dtype="float16"), residuals={})
    keep_residual(worker, 3, np.array([7e4, -1e9, 0.5, 1e-9], np.float32))
    kept = worker.residuals[3]
    assert kept.dtype == np.float16 and np.isfinite(kept).all()
    np.testing.assert_array_equal(kept, np.array([65504, -65504, 0.5, 0], np.float16))
    feedback = compression.ErrorFeedback(compression.get("topk")(0.5))
    feedback.encode(np.ones(4, np.float32), kept.astype(np.float32))  # the next round's update goes out


def test_a_catch_up_of_another_round_is_refused():
    """A worker that missed broadcasts applies the dense model before this round; one of an earlier round would
    train its clients from a stale model."""
    length = 8
    worker = types.SimpleNamespace(plan=types.SimpleNamespace(length=length), synced_round=1,
                                   reference=np.zeros(length, np.float32))
    dense = compression.get("none")()
    catchup = wire.encode_broadcast(2, "none", length, False, dense.encode(np.ones(length, np.float32)))
    delta = wire.encode_broadcast(5, "none", length, True, dense.encode(np.ones(length, np.float32)))
    with pytest.raises(wire.WireError, match="catch-up: round 2"):
        sync(worker, delta, 5, catchup)


def test_an_update_the_server_refuses_is_still_counted_as_uploaded(tmp_path, monkeypatch):
    """Its client sent it: bytes_up is the len() of every update sent, the refused (truncated) ones too."""
    import fl

    encode, sent = wire.encode_update, []

    def truncated(round, cid, *a):
        message = encode(round, cid, *a)
        message = message[:-3] if cid == 1 else message
        sent.append(len(message))
        return message

    monkeypatch.setattr(wire, "encode_update", truncated)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=none",
                              "compression.ratio=0.1", "fl.num_clients=4", "fl.clients_per_round=4", "fl.rounds=2"]))
    assert rows["rejected"].tolist() == [1, 1] and len(sent) == 8
    assert rows["bytes_up"].sum() == rows["bytes_up_payload"].sum() == sum(sent)


def test_a_sender_whose_update_the_server_refuses_takes_its_old_residual_back(tmp_path, monkeypatch):
    """Error feedback: client 1's round-1 update is truncated on the way and refused; at its next round it starts
    from the residual it had before (as a masked round's refused sender does), not from one that assumes the server
    summed what it sent. The others start from their new residuals."""
    import fl

    encode, keep, now, start = wire.encode_update, plain.keep_residual, {}, {}

    def truncated(round, cid, *a):
        now["round"] = round
        message = encode(round, cid, *a)
        return message[:-3] if (round, cid) == (1, 1) else message

    def kept(worker, cid, residual):  # the residual this round's update started from, before the new one replaces it
        old = worker.residuals.get(cid)
        start[now["round"], cid] = None if old is None else old.copy()
        keep(worker, cid, residual)

    monkeypatch.setattr(wire, "encode_update", truncated)
    monkeypatch.setattr(plain, "keep_residual", kept)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=none",
                              "compression.ratio=0.1", "fl.num_clients=4", "fl.clients_per_round=4", "fl.rounds=3"]))
    assert rows["rejected"].tolist() == [0, 1, 0] and rows["error_feedback"].all()
    np.testing.assert_array_equal(start[2, 1], start[1, 1])
    for cid in (0, 2, 3):
        assert not np.array_equal(start[2, cid], start[1, cid])


def test_a_dead_workers_clients_count_as_dropped_and_a_client_that_sends_nothing_as_rejected(tmp_path, monkeypatch):
    """Worker 1 (clients 1 and 5 of 8, on four workers) dies in every round's call, and client 2's update is not
    finite: the row says which clients were lost with their worker and which refused to send."""
    import fl
    from fl.runtime.pool import InlinePool
    from fl.runtime.worker import Worker

    call, train = InlinePool.call, Worker.train

    def dies(self, step, args, **kw):
        replies = call(self, step, args, **kw)
        if step is plain.client_round and 1 in replies:
            replies[1] = None
        return replies

    def poisoned(self, cid, round):
        update, n = train(self, cid, round)
        return (update * np.float32(np.nan) if cid == 2 else update), n

    monkeypatch.setattr(InlinePool, "call", dies)
    monkeypatch.setattr(Worker, "train", poisoned)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=none",
                              "compression.ratio=0.1", "fl.num_clients=8", "fl.clients_per_round=8", "fl.rounds=2",
                              "ray.num_workers=4"]))
    assert rows["dropped"].tolist() == [2, 2] and rows["rejected"].tolist() == [1, 1]


def test_a_broadcast_of_another_round_is_refused():
    """A worker trains its clients for the round it is called for: a broadcast of another round (a replayed or
    late one) would train them from the wrong model, and under masking hand them another round's index set."""
    length, dense = 8, compression.get("none")()
    worker = types.SimpleNamespace(plan=types.SimpleNamespace(length=length), synced_round=4,
                                   reference=np.zeros(length, np.float32))
    broadcast = wire.encode_broadcast(6, "none", length, False, dense.encode(np.ones(length, np.float32)))
    with pytest.raises(wire.WireError, match="model broadcast: round 6, expected 5"):
        sync(worker, broadcast, 5)
    assert worker.synced_round == 4 and not worker.reference.any()


def test_a_sender_takes_back_its_old_memory_only_if_refused_and_the_worker_then_holds_no_old_memory():
    """fl.aggregation=memory: the old memories are held only until the worker is next called; kept longer, a worker
    would hold a second memory for every client it ever sent for."""
    from fl.rounds.client import restore_refused

    old, new = np.full(4, 1.0, np.float32), np.full(4, 2.0, np.float32)
    worker = types.SimpleNamespace(replaced={3: old, 4: None, 5: old}, replaced_round=2,
                                   residuals={3: new, 4: new, 5: new})
    restore_refused(worker, {1: [3, 4, 5], 2: [3, 4]})
    assert worker.residuals.keys() == {3, 5} and worker.residuals[3] is old and worker.residuals[5] is new
    assert worker.replaced == {}
