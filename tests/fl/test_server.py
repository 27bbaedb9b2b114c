"""The Server role: what each worker is sent (catch-ups for stale ones), what each client's downlink costs,
and how a round's result lands in the global weights."""
import numpy as np
import pytest

import fl
from fl import wire
from fl.config import ConfigError, as_dict, validate
from fl.plan import Plan
from fl.results import config_hash
from fl.server import Server

LAYERS = [4096, 64, 640, 10]


def _server(*overrides):
    plan = Plan.build(validate(fl.compose(["model=mlp_small", *overrides])), LAYERS)
    return Server(plan, np.zeros(plan.length, np.float32))


def test_a_compressed_broadcast_sends_stale_and_revived_workers_a_catch_up_and_counts_it_per_client():
    server = _server("secagg=none", "compression.ratio=0.1")
    put = lambda message: message  # noqa: E731  (inline: the message itself is the handle)
    delivery, down, catchups = server.broadcast(0, [0, 1, 2, 3], {0: [0, 2], 1: [1, 3]}, put)
    assert delivery.catchup is None and catchups == 0 and down == 4 * server.sizes[0]
    for w in (0, 1):
        assert delivery.to(w) == (delivery.ref, None)
    server.weights += 0.01
    delivery, down, catchups = server.broadcast(1, [0, 1], {0: [0]}, put)  # worker 1 sits this round out
    delivery.to(0)
    assert wire.decode_broadcast(delivery.ref, server.plan.length).is_delta and catchups == 0
    server.weights += 0.01
    server.forget([0])  # worker 0 died and was replaced: it holds no model
    delivery, down, catchups = server.broadcast(2, [2, 3, 5], {0: [2], 1: [3, 5]}, put)
    assert delivery.stale == {0, 1} and delivery.to(1)[1] == delivery.catchup  # worker 1 missed round 1
    catchup = wire.decode_broadcast(delivery.catchup, server.plan.length)
    assert catchup.round == 1 and not catchup.is_delta
    # clients 2 and 3 missed round 1 (one broadcast, smaller than the dense model); client 5 never had one: it
    # fetches the catch-up, counted as sent (it names round 1, which round 0's dense broadcast did not)
    missed = [server.sizes[1], server.sizes[1], len(delivery.catchup)]
    assert catchups == 3 and down == 3 * server.sizes[2] + sum(missed)
    assert len(delivery.catchup) == server.sizes[0] + 2


def test_a_dense_broadcast_is_the_whole_model_and_needs_no_catch_up():
    server = _server("secagg=none", "compression=none")
    put = lambda message: message  # noqa: E731
    server.broadcast(0, [0, 1], {0: [0, 1]}, put)
    server.weights += 0.5
    delivery, down, catchups = server.broadcast(1, [2, 3], {1: [3], 0: [2]}, put)
    message = wire.decode_broadcast(delivery.ref, server.plan.length)
    assert not message.is_delta and message.round == 1 and (message.payload == server.weights.tobytes())
    assert delivery.catchup is None and catchups == 0 and down == 2 * len(delivery.ref)
    assert 4 * server.plan.length < len(delivery.ref) < 4 * server.plan.length + 32  # the model and a short header


def test_a_masked_result_lands_at_the_index_set_only():
    server = _server("secagg=dh", "compression.ratio=0.01", "compression.index_policy=randk")
    server.broadcast(0, [0, 1], {0: [0, 1]}, lambda m: m)
    values = np.arange(1, server.plan.k + 1, dtype=np.float32)
    server.apply_masked(0, values, 2.0, None)
    expected = np.zeros(server.plan.length, np.float32)
    expected[server.positions] = values
    np.testing.assert_array_equal(server.weights, expected)


def test_server_momentum_is_fedavgm_and_keeps_moving_an_earlier_rounds_positions():
    """w += lr * m, m = beta * m + update (Hsu et al. 2019); a masked round's values enter m at its index set
    only, and the next round still moves them."""
    lr, beta = 0.5, 0.9
    server = _server("secagg=dh", "compression.ratio=0.01", "compression.index_policy=randk",
                     f"fl.server_lr={lr}", f"fl.server_momentum={beta}")
    expected, buffer = np.zeros(server.plan.length, np.float32), np.zeros(server.plan.length, np.float32)
    earlier = before = None
    for r in range(3):
        server.broadcast(r, [0, 1], {0: [0, 1]}, lambda m: m)
        values = np.random.default_rng(r).normal(size=server.plan.k).astype(np.float32)
        server.apply_masked(r, values, 2.0, None)
        buffer *= np.float32(beta)
        buffer[server.positions] += values
        expected += np.float32(lr) * buffer
        np.testing.assert_array_equal(server.weights, expected)
        if earlier is not None:
            only_earlier = np.setdiff1d(earlier, server.positions)
            assert only_earlier.size and np.all(server.weights[only_earlier] != before[only_earlier])
        earlier, before = server.positions.copy(), server.weights.copy()
    plain = _server("secagg=none", "compression=none", f"fl.server_lr={lr}", f"fl.server_momentum={beta}")
    update = np.ones(plain.plan.length, np.float32)
    plain.apply(update)
    plain.apply(update)
    np.testing.assert_allclose(plain.weights, lr * (1 + (beta + 1)) * update)  # lr*1, then lr*(beta*1 + 1)


def test_the_default_server_step_adds_the_mean_update_as_is_and_bad_settings_are_refused():
    server = _server("secagg=none", "compression=none")
    update = np.random.default_rng(0).normal(size=server.plan.length).astype(np.float32)
    server.apply(update)
    server.apply(update)
    np.testing.assert_array_equal(server.weights, update + update)  # FedAvg, bit for bit
    assert server.step.buffer is None
    scaled = _server("secagg=none", "compression=none", "fl.server_lr=2.0")
    scaled.apply(update)
    np.testing.assert_array_equal(scaled.weights, np.float32(2.0) * update)
    recorded = as_dict(validate(fl.compose(["secagg=none"])))
    before_keys = {**recorded, "fl": {k: v for k, v in recorded["fl"].items() if not k.startswith("server_")}}
    assert config_hash(before_keys) == config_hash(recorded)  # runs from before the keys are still found
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.server_momentum=0.9"])))) != \
        config_hash(recorded)
    for bad in ("fl.server_lr=0", "fl.server_lr=-1", "fl.server_lr=inf", "fl.server_momentum=1.0",
                "fl.server_momentum=-0.5"):
        with pytest.raises(ConfigError, match="server_lr.*server_momentum"):
            validate(fl.compose([bad]))


def test_finite_updates_that_carry_the_model_past_float32_end_the_run_naming_it_not_a_later_broadcast():
    """Two finite rounds of 3e38 took the weights to Inf and the next broadcast failed as 'vector contains NaN'."""
    from fl.errors import Diverged

    server = _server("secagg=none", "compression=none")
    update = np.zeros(server.plan.length, np.float32)
    update[:3] = 3e38
    server.apply(update)
    assert np.isfinite(server.weights).all()
    with pytest.raises(Diverged, match="3 entries beyond float32's range"):
        server.apply(update)


@pytest.mark.parametrize("codec", ["rotation", "countsketch"])
def test_a_masked_linear_codecs_summed_table_is_applied_as_the_clients_weighted_mean_table(codec):
    """Clients mask the table of w times their update: the server divides the summed table by the summed weight
    before decoding it (a count sketch's through its accumulator's heavy hitters), as it would one client's table of
    the weighted mean update."""
    from compression.countsketch import SketchAccumulator

    server = _server("secagg=dh", f"compression={codec}", "compression.ratio=0.1")
    linear, length = server.plan.linear, server.plan.length
    updates = np.random.default_rng(0).normal(scale=0.01, size=(2, length)).astype(np.float32)
    summed = sum(linear.masked_table(u * np.float32(w)).ravel().astype(np.float64) for w, u in zip((0.5, 1.5), updates))
    mean = linear.masked_table((np.float32(0.5) * updates[0] + np.float32(1.5) * updates[1]) / np.float32(2.0))
    server.apply_masked(0, None, 2.0, summed)
    if codec == "rotation":
        expected = linear.from_table(mean.ravel(), length)
    else:
        accumulator = SketchAccumulator(linear, length)
        accumulator.add(mean.reshape(accumulator.table.shape))
        positions, values = accumulator.extract()
        expected = np.zeros(length, np.float32)
        expected[positions] = values
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(server.weights, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


def test_under_memory_a_plain_round_that_sums_no_update_leaves_the_model_where_it_is():
    """The memories' mean moves the model once for each round that summed an update; a round whose every update
    was lost or refused sums nothing, and stepping by the unchanged mean again would count the same updates twice."""
    import compression
    from fl.rounds.plain import PlainAggregator

    server = _server("secagg=none", "compression=none", "fl.aggregation=memory")
    length, codec = server.plan.length, compression.get("none")()
    update = np.random.default_rng(0).normal(size=length).astype(np.float32)
    agg = PlainAggregator(0, length, codec)
    agg.add(wire.encode_update(0, 3, "none", length, 2.0, update.tobytes()), 3)
    server.apply_plain(agg)
    np.testing.assert_array_equal(server.weights, update)
    server.apply_plain(PlainAggregator(1, length, codec))
    np.testing.assert_array_equal(server.weights, update)
    assert server.memory.weight == 2.0 and server.memory.members == {3}
