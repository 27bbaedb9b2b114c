"""The plain round: batches of trained clients encode to the same messages; the server sums only good updates."""
import numpy as np
import pytest
from fixtures_workers import attached_workers

from fl import wire
from fl.rounds import plain


def test_server_rejects_a_payload_with_nan_and_keeps_its_sum(tmp_path):
    from fl.rounds.plain import PlainAggregator

    agg = PlainAggregator(0, 4)
    good = np.array([1, 2, 3, 4], np.float32)
    agg.add(wire.encode_update(0, 0, "none", 4, 2.0, good.tobytes()))
    bad = np.array([1, np.nan, 0, 0], np.float32).tobytes()
    with pytest.raises(ValueError, match="NaN"):
        agg.add(wire.encode_update(0, 1, "none", 4, 10.0, bad))
    with pytest.raises(wire.WireError):
        agg.add(wire.encode_update(0, 2, "none", 4, 10.0, good.tobytes())[:-3])  # truncated
    assert agg.weight == 2.0 and agg.rejected == 1
    np.testing.assert_array_equal(agg.result(), good)  # only the good update, with its own weight


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
        single, _ = one_at_a_time.run(plain.client_round, broadcast, r, list(range(6)), None)
        monkeypatch.setattr(plain, "ENCODE_BATCH_BYTES", 4 * length * 4)  # four clients, then two
        together, _ = batched.run(plain.client_round, broadcast, r, list(range(6)), None)
        assert single == together and all(m is not None for _, m in single)
        assert sizes == [1] * 6 + [4, 2]
        sizes.clear()
        for cid in range(6):
            np.testing.assert_array_equal(one_at_a_time.residuals[cid], batched.residuals[cid])
        weights += 0.01
