"""Compression together with masking, without Ray: the server's sum is exactly the plain sum."""
import numpy as np
import pytest

import secagg
from compression.index_policy import IndexPolicy
from fl import wire
from fl.server import MaskedAggregator
from omegaconf import OmegaConf


def _cfg(n):
    return OmegaConf.create({"secagg": {"name": "dh", "clip": 0.5, "sketch_clip": 4.0, "max_weight": 8.0},
                             "fl": {"clients_per_round": n}})


@pytest.mark.parametrize("n_clients", [2, 5, 12])
def test_masked_sum_of_quantized_compressed_vectors_equals_the_plain_sum_exactly(n_clients):
    length, rng = 20_000, np.random.default_rng(n_clients)
    policy = IndexPolicy("sketch", length, 400, root_seed=1, sketch_rows=1, sketch_cols_per_k=2.0)
    positions, _ = policy.positions(0)
    sketch = policy.sketch(0)
    cells = sketch.rows * sketch.cols
    cfg, cohort = _cfg(n_clients), list(range(10, 10 + n_clients))
    session = secagg.session_id("test-run", 0, cohort)
    agg = MaskedAggregator(cfg, session, cohort, len(positions), cells)
    clients = {c: secagg.DHClient(c, session, cohort, agg.length) for c in cohort}
    for c in cohort:
        agg.add_keys(wire.encode_advertise(clients[c].advertise()))
    roster = wire.decode_roster(agg.roster())

    plain = np.zeros(agg.length, np.uint32)
    float_values, float_weight = np.zeros(len(positions)), 0.0
    for c in cohort:
        update = rng.normal(scale=0.05, size=length).astype(np.float32)
        w = float(np.float32(rng.uniform(0.5, 2.0)))  # the weight travels as float32
        qv, sent = agg.q_values.quantize_with_error(update[positions] * w, rng)
        qw = agg.q_weight.quantize(np.array([w], np.float32), rng)
        qs = agg.q_sketch.quantize(sketch.sketch(update).ravel(), rng)
        vector = np.concatenate([qv, qw, qs])
        plain += vector  # uint32 arithmetic wraps mod 2^32, as the field does
        masked = clients[c].mask(roster, vector)
        assert not np.array_equal(masked.masked, vector)
        agg.add(wire.encode_masked(masked))
        float_values += sent
        float_weight += w

    values, weight, table = agg.result()
    np.testing.assert_array_equal(agg.total, plain)
    assert weight == pytest.approx(float_weight, abs=n_clients * 8.0 / agg.q_weight.bound)
    np.testing.assert_allclose(values, float_values / weight, rtol=1e-5, atol=1e-7)
    assert table.shape == (cells,)


def test_a_client_missing_its_masked_input_aborts_the_round_naming_it():
    cohort = [0, 1, 2]
    session = secagg.session_id("test-run", 4, cohort)
    agg = MaskedAggregator(_cfg(3), session, cohort, 10, 0)
    clients = {c: secagg.DHClient(c, session, cohort, agg.length) for c in cohort}
    for c in cohort:
        agg.add_keys(wire.encode_advertise(clients[c].advertise()))
    roster = wire.decode_roster(agg.roster())
    for c in (0, 2):
        agg.add(wire.encode_masked(clients[c].mask(roster, np.ones(agg.length, np.uint32))))
    with pytest.raises(secagg.RoundAborted, match=r"\[1\]"):
        agg.result()
