"""Compression together with masking, without Ray: the server's sum is exactly the plain sum."""
import numpy as np
import pytest
from omegaconf import OmegaConf

import secagg
from compression.index_policy import IndexPolicy
from fl import wire
from fl.server import MaskedAggregator


def _cfg(n, name="dh"):
    return OmegaConf.create({"secagg": {"name": name, "clip": 0.5, "sketch_clip": 4.0, "max_weight": 8.0,
                                        "threshold": None, "neighbours": None},
                             "fl": {"clients_per_round": n}})


def _round(n_clients, drop_before_input=(), drop_before_unmask=(), name="dh", seed=0):
    """Drive one masked round through the wire; returns (aggregator, plain sum of the survivors, floats)."""
    length, rng = 20_000, np.random.default_rng(seed)
    policy = IndexPolicy("sketch", length, 400, root_seed=1, sketch_rows=1, sketch_cols_per_k=2.0)
    positions, _ = policy.positions(0)
    sketch = policy.sketch(0)
    cfg, cohort = _cfg(n_clients, name), list(range(10, 10 + n_clients))
    agg = MaskedAggregator(cfg, secagg.session_id("test-run", 0, cohort), cohort, len(positions),
                           sketch.rows * sketch.cols)
    clients = {c: secagg.Client(agg.config, c) for c in cohort}
    for c in cohort:
        agg.add_keys(wire.encode_advertise(clients[c].advertise()))
    roster = wire.decode_roster(agg.roster())
    for c in cohort:
        agg.add_shares(wire.encode_share_keys(clients[c].share_keys(roster)))
    bundles = agg.bundles()
    plain = np.zeros(agg.length, np.uint32)
    float_values, float_weight = np.zeros(len(positions)), 0.0
    for c in cohort:
        update = rng.normal(scale=0.05, size=length).astype(np.float32)
        w = float(np.float32(rng.uniform(0.5, 2.0)))  # the weight travels as float32
        qv, sent = agg.q_values.quantize_with_error(update[positions] * w, rng)
        vector = np.concatenate([qv, agg.q_weight.quantize(np.array([w], np.float32), rng),
                                 agg.q_sketch.quantize(sketch.sketch(update).ravel(), rng)])
        if c in drop_before_input:
            continue
        masked = clients[c].masked_input(wire.decode_share_bundle(bundles[c]), vector)
        assert not np.array_equal(masked.masked, vector)
        agg.add(wire.encode_masked(masked))
        plain += vector  # uint32 arithmetic wraps mod 2^32, as the field does
        float_values += sent
        float_weight += w
    request, survivors = agg.unmask_request()
    for c in survivors:
        if c not in drop_before_unmask:
            agg.add_unmask(wire.encode_unmask_response(clients[c].unmask(wire.decode_unmask_request(request))))
    return agg, plain, float_values, float_weight


@pytest.mark.parametrize("n_clients,name", [(2, "dh"), (5, "dh"), (12, "dh"), (12, "secaggplus")])
def test_masked_sum_of_quantized_compressed_vectors_equals_the_plain_sum_exactly(n_clients, name):
    agg, plain, float_values, float_weight = _round(n_clients, name=name)
    values, weight, table = agg.result()
    np.testing.assert_array_equal(agg.total, plain)
    assert weight == pytest.approx(float_weight, abs=n_clients * 8.0 / agg.q_weight.bound)
    np.testing.assert_allclose(values, float_values / weight, rtol=1e-5, atol=1e-7)
    assert table.shape == (agg.sketch_cells,)


def test_clients_dropping_before_input_and_before_unmask_are_recovered_exactly():
    agg, plain, _, _ = _round(9, drop_before_input=(11, 15), drop_before_unmask=(12,))
    agg.result()
    np.testing.assert_array_equal(agg.total, plain)  # the sum over the 7 survivors, nothing else
    assert agg.state.dropped_by_step["masked_input"] == [11, 15]


def test_fewer_than_t_survivors_abort_the_round():
    with pytest.raises(secagg.RoundAborted):
        agg, *_ = _round(6, drop_before_input=(10, 11, 12))  # 3 of 6 left, t = 4
        agg.result()
