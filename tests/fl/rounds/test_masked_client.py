"""The masked round's client half on one worker: residuals staged in a masked round are kept only if that
round was applied, and a worker's first step of each round settles its last round's residuals."""
from types import SimpleNamespace

import numpy as np
import pytest
import secagg
from fixtures_workers import attached_workers

from fl import wire
from fl.rounds import client, masked
from fl.rounds.layout import MaskedLayout


def _advertise(worker, round, aborted, unsummed=None):
    cohort = [0, 2]
    session = secagg.session_id("test", round, cohort)
    out, _ = worker.run(masked.advertise, round, [session], cohort, cohort, [10], aborted, unsummed or {},
                        [bytes(32)])
    return out


def test_an_aborted_rounds_staged_residuals_are_dropped_and_an_applied_rounds_are_kept():
    _, plan, (worker,) = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1",
                                           "fl.num_clients=4", "fl.clients_per_round=2"])
    assert plan.error_feedback
    old, staged = np.full(plan.length, 0.5, np.float32), np.full(plan.length, 2.0, np.float32)
    worker.residuals = {0: old.copy()}
    worker.staged, worker.staged_round = {0: staged.copy(), 2: staged.copy()}, 3
    out = _advertise(worker, 4, aborted=[1, 3])  # round 3 aborted: its residuals never reached the model
    assert [cid for cid, _ in out] == [0, 2] and all(wire.decode_advertise(m) for _, m in out)
    np.testing.assert_array_equal(worker.residuals[0], old)
    assert 2 not in worker.residuals and worker.staged == {}

    worker.staged, worker.staged_round = {0: staged.copy(), 2: staged.copy()}, 5
    _advertise(worker, 6, aborted=[1, 3])  # round 5 was applied
    for cid in (0, 2):
        np.testing.assert_array_equal(worker.residuals[cid], staged)
    assert worker.staged == {} and [set(p) for p in worker.pending] == [{0, 2}]


def test_the_residual_of_a_client_whose_values_the_server_refused_is_dropped_in_an_applied_round():
    """Workers learned only of whole aborted rounds: a client whose masked input was refused kept a residual for
    values the model never received."""
    _, plan, (worker,) = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1",
                                           "fl.num_clients=4", "fl.clients_per_round=2"])
    old, staged = np.full(plan.length, 0.5, np.float32), np.full(plan.length, 2.0, np.float32)
    worker.residuals = {0: old.copy()}
    worker.staged, worker.staged_round = {0: staged.copy(), 2: staged.copy()}, 5
    _advertise(worker, 6, aborted=[1], unsummed={5: [0], 4: [2]})  # round 5 applied without client 0's values
    np.testing.assert_array_equal(worker.residuals[0], old)
    np.testing.assert_array_equal(worker.residuals[2], staged)


def test_the_update_a_client_masks_carries_its_residual(monkeypatch):
    """Error feedback under masking: what a client summarizes and masks is its update plus what it kept."""
    _, plan, (worker,) = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1",
                                           "fl.num_clients=4", "fl.clients_per_round=2"])
    update = np.linspace(-1, 1, plan.length, dtype=np.float32)
    monkeypatch.setattr(client, "timed_train", lambda w, cid, r, t: (update.copy(), 7))
    worker.residuals = {0: np.full(plan.length, 0.25, np.float32)}
    corrected, n = client.corrected_update(worker, 0, 3, {})
    assert n == 7
    np.testing.assert_array_equal(corrected, update + np.float32(0.25))
    np.testing.assert_array_equal(client.corrected_update(worker, 2, 3, {})[0], update)  # none kept yet


def test_the_staged_residual_is_the_corrected_update_less_what_was_sent_for_it():
    """The values go out weighted (w times the update) and quantized; the residual keeps the rest of the
    unweighted update: the unsent positions whole, and at the index set the clipping and rounding error / w."""
    _, plan, _ = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1", "fl.num_clients=4",
                                   "fl.clients_per_round=2", "secagg.quant_bits=6"])
    rng = np.random.default_rng(0)
    corrected = rng.normal(0, 0.1, plan.length).astype(np.float32)
    idx = np.sort(rng.choice(plan.length, plan.k, replace=False))
    layout, w = MaskedLayout(plan, plan.k, 0), 2.5
    holder = SimpleNamespace(staged={}, residuals={})
    staged = holder.staged
    vector = masked._masked_vector(plan, layout, corrected, w, idx, None, rng, holder, 0)
    sent = layout.q_values.dequantize(vector[:plan.k])  # the weighted values the server sums for this client
    assert np.abs(sent / w - corrected[idx]).max() > 1e-3  # 6-bit values: the rounding error is not negligible
    np.testing.assert_allclose(staged[0][idx] + sent / w, corrected[idx], atol=1e-6)
    rest = np.setdiff1d(np.arange(plan.length), idx)
    np.testing.assert_array_equal(staged[0][rest], corrected[rest])


def test_the_weight_is_rounded_stochastically_so_its_mean_is_the_weight():
    """Rounded down, every client's weight would be biased low by up to a step."""
    _, plan, _ = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1", "fl.num_clients=4",
                                   "fl.clients_per_round=2"])
    layout = MaskedLayout(plan, 0, 0)
    scaled = 12345.25  # a quarter of a step above a representable weight
    w, rng = scaled / layout.weight_scale, np.random.default_rng(0)
    draws = [sum(int(d) << (layout.digit_bits * j) for j, d in enumerate(layout.weight(w, rng)))
             for _ in range(4000)]
    assert set(draws) == {12345, 12346}
    assert np.mean(draws) == pytest.approx(scaled, abs=0.03)


def test_a_client_that_cannot_check_the_unmask_request_keeps_its_staged_residual():
    """The unmask request goes to the survivors, whose masked inputs the server sums whether or not they answer
    it: a client that cannot check the request sends no shares, but its values are in the sum, so its residual
    stays staged (kept once the round is applied), as a client dropping at that step does. The exchange's keys
    are dropped."""
    staged = {3: np.full(4, 0.5, np.float32), 4: np.full(4, 2.0, np.float32)}
    keys = SimpleNamespace(unmask=lambda request: pytest.fail("a request that does not decode reached the keys"))
    worker = SimpleNamespace(pending=[{3: keys, 4: keys}], staged=dict(staged), held={})
    out = list(masked.unmask(worker, b"not an unmask request", [3, 4], 0, {"t_mask": 0.0}))
    assert out == [(3, None), (4, None)]
    assert worker.staged.keys() == staged.keys() and worker.pending == [{}]


def test_an_update_held_between_the_exchanges_of_fresh_is_let_go_at_the_workers_next_round():
    """A client gone after its summary (fresh's first exchange) never has its held update taken for the second:
    the worker's next first step lets it go, so no worker holds a departed client's whole update for later rounds."""
    _, plan, (worker,) = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1",
                                           "fl.num_clients=4", "fl.clients_per_round=2"])
    worker.held = {2: (np.ones(plan.length, np.float32), 1.0)}
    worker.staged, worker.staged_round = {}, 5
    _advertise(worker, 6, aborted=[])
    assert worker.held == {} and worker.staged == {}


def test_an_update_not_finite_only_where_no_value_is_sent_is_refused_and_nothing_is_staged():
    """Its values at the index set are finite and would quantize, but its residual (the rest of the update) would
    carry the NaN into each of its later updates: the client refuses to send, and stages nothing."""
    _, plan, _ = attached_workers(["model=mlp_small", "secagg=dh", "compression.ratio=0.1", "fl.num_clients=4",
                                   "fl.clients_per_round=2", "compression.index_policy=randk"])
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(plan.length, plan.k, replace=False))
    corrected = rng.normal(0, 0.1, plan.length).astype(np.float32)
    corrected[np.setdiff1d(np.arange(plan.length), idx)[0]] = np.nan
    holder = SimpleNamespace(staged={}, residuals={})
    assert plan.error_feedback and np.isfinite(corrected[idx]).all()
    with pytest.raises(ValueError, match="not finite"):
        masked._masked_vector(plan, MaskedLayout(plan, plan.k, 0), corrected, 1.5, idx, None, rng, holder, 0)
    assert holder.staged == {}
