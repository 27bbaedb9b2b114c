"""Whole rounds: the unmasked sum is exactly the survivors' plain sum under dropouts; below t nothing is revealed."""

import numpy as np
import pytest
from secagg_rounds import LENGTH, Round, plain_sum, random_inputs, run_round

from secagg import FixedPointQuantizer, ProtocolError, RoundAborted, UnmaskRequest

PROTOCOLS = ["dh", "secaggplus"]
SIZES = [3, 10, 30]


def guaranteed_drops(config):
    """How many clients may drop anywhere with every secret keeping t holders: group size - t."""
    return config.group_size - config.threshold


def random_pattern(rng, ids, drops):
    """`drops` distinct clients, each vanishing before a random step (share keys, masked input, unmask)."""
    chosen = rng.choice(ids, size=drops, replace=False)
    steps = rng.integers(0, 3, size=drops)
    return tuple([int(c) for c, s in zip(chosen, steps) if s == k] for k in range(3))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", SIZES)
def test_without_dropouts_the_unmasked_sum_is_the_plain_sum(protocol, n):
    ids = list(range(n))
    inputs = random_inputs(ids)
    r, total = run_round(protocol, ids, inputs)
    assert total.dtype == np.uint32
    np.testing.assert_array_equal(total, plain_sum(inputs, ids, LENGTH))
    assert r.server.survivors == tuple(ids)
    assert r.server.dropped_by_step == {"share_keys": [], "masked_input": [], "unmask": []}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", SIZES)
def test_any_dropouts_that_leave_t_holders_give_the_exact_sum_of_the_survivors(protocol, n):
    ids = list(range(n))
    rng = np.random.default_rng(n)
    inputs = random_inputs(ids, seed=n)
    patterns = [([0], [], []), ([], [0], []), ([], [], [0])]  # one dropout at each step
    patterns += [random_pattern(rng, ids, d) for d in rng.integers(1, n, size=8)]
    exercised = 0
    for drop_share, drop_masked, drop_unmask in patterns:
        r = Round(protocol, ids)
        if len(drop_share) + len(drop_masked) + len(drop_unmask) > guaranteed_drops(r.config):
            continue
        r.advertise()
        r.share_keys(drop_share)
        r.masked_input(inputs, drop_masked)
        total = r.unmask(drop_unmask)
        survivors = sorted(set(ids) - set(drop_share) - set(drop_masked))
        np.testing.assert_array_equal(total, plain_sum(inputs, survivors, LENGTH))
        assert r.server.survivors == tuple(survivors)
        assert r.server.dropped_by_step == {"share_keys": sorted(drop_share), "masked_input": sorted(drop_masked),
                                            "unmask": sorted(drop_unmask)}
        exercised += 1
    assert exercised >= 3


@pytest.mark.parametrize("n", SIZES)
def test_full_graph_tolerates_every_pattern_that_leaves_t_responders(n):
    ids = list(range(n))
    t = n // 2 + 1
    rng = np.random.default_rng(100 + n)
    inputs = random_inputs(ids, seed=n)
    for _ in range(6):
        drop_share, drop_masked, drop_unmask = random_pattern(rng, ids, n - t)  # exactly t remain
        r, total = run_round("dh", ids, inputs, drop_share, drop_masked, drop_unmask)
        survivors = sorted(set(ids) - set(drop_share) - set(drop_masked))
        np.testing.assert_array_equal(total, plain_sum(inputs, survivors, LENGTH))


@pytest.mark.parametrize("n", SIZES)
def test_secaggplus_is_exact_or_aborts_under_heavy_dropout(n):
    ids = list(range(n))
    rng = np.random.default_rng(200 + n)
    inputs = random_inputs(ids, seed=n)
    outcomes = set()
    for drops in rng.integers(1, n - 1, size=8):
        pattern = random_pattern(rng, ids, drops)
        try:
            r, total = run_round("secaggplus", ids, inputs, *pattern)
        except RoundAborted:
            outcomes.add("aborted")
            continue
        outcomes.add("exact")
        np.testing.assert_array_equal(total, plain_sum(inputs, r.server.survivors, LENGTH))
        assert set(r.server.survivors) <= set(ids) - set(pattern[0]) - set(pattern[1])
    assert outcomes  # every round either gave the exact survivors' sum or aborted


def test_secaggplus_aborts_when_a_neighbourhood_falls_below_t_though_most_clients_survive():
    ids = list(range(30))
    r = Round("secaggplus", ids)
    cfg = r.config
    assert cfg.degree == 10 and cfg.threshold == 6
    victim = 0
    gone = list(cfg.neighbours(victim))[: cfg.degree // 2 + 1]  # 6 of its 10 neighbours: 5 of 11 holders left
    r.advertise()
    r.share_keys()
    r.masked_input(random_inputs(ids), drop=gone)
    assert len(r.server.survivors) == 24 >= cfg.threshold
    with pytest.raises(RoundAborted):
        r.unmask()
    assert victim in r.refused  # the victim itself refuses: too few survivors in its group


# --- below t: abort, reveal nothing ------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", SIZES)
def test_too_few_clients_sending_shares_aborts_at_the_bundles(protocol, n):
    ids = list(range(n))
    r = Round(protocol, ids)
    r.advertise()
    gone = ids[: n - r.config.threshold + 1]
    with pytest.raises(RoundAborted) as info:
        r.share_keys(drop=gone)
    if protocol == "dh":
        assert info.value.missing == tuple(gone)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", SIZES)
def test_too_few_masked_inputs_aborts_before_any_share_is_revealed(protocol, n):
    ids = list(range(n))
    inputs = random_inputs(ids)
    r = Round(protocol, ids)
    r.advertise()
    r.share_keys()
    t = r.config.threshold
    keep = ids[: t - 1]
    with pytest.raises(RoundAborted):
        r.masked_input(inputs, drop=ids[t - 1:])
    with pytest.raises(ProtocolError):
        r.server.result()  # the server never gets to a sum
    # and a server that asks anyway gets no share from any client
    forged = UnmaskRequest(session=r.config.session, survivors=tuple(keep), dropped=tuple(ids[t - 1:]))
    for cid in keep:
        with pytest.raises(RoundAborted, match="no shares revealed"):
            r.clients[cid].unmask(forged)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", SIZES)
def test_too_few_unmask_responses_aborts_the_result(protocol, n):
    ids = list(range(n))
    inputs = random_inputs(ids)
    r = Round(protocol, ids)
    r.advertise()
    r.share_keys()
    r.masked_input(inputs)
    t = r.config.threshold
    with pytest.raises(RoundAborted):
        r.unmask(drop=ids[t - 1:])
    assert r.server.dropped_by_step["unmask"] == ids[t - 1:]
    with pytest.raises(ProtocolError):
        r.server.result()  # stays aborted


def test_too_few_advertised_keys_aborts_at_the_roster():
    ids = list(range(10))
    r = Round("dh", ids)
    with pytest.raises(RoundAborted) as info:
        r.advertise(drop=ids[:5])
    assert info.value.missing == tuple(ids[:5])


# --- quantized inputs at the extremes, with the largest cohort the quantizer allows -------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_signed_lift_is_right_at_the_clip_bound_with_the_maximum_cohort(protocol, sign):
    n, clip = 30, 2.0
    ids = list(range(n))
    quantizer = FixedPointQuantizer(clip=clip, max_clients=n)
    rng = np.random.default_rng(7)
    inputs = {cid: quantizer.quantize(np.full(LENGTH, sign * 5.0), rng) for cid in ids}  # clipped to +-clip
    _, total = run_round(protocol, ids, inputs)
    np.testing.assert_array_equal(total.view(np.int32), np.full(LENGTH, sign * n * quantizer.bound))
    np.testing.assert_allclose(quantizer.dequantize(total), sign * n * clip, rtol=1e-12)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mixed_extremes_lift_correctly_under_dropouts(protocol):
    n, clip = 30, 1.0
    ids = list(range(n))
    quantizer = FixedPointQuantizer(clip=clip, max_clients=n)
    rng = np.random.default_rng(8)
    floats = {cid: rng.choice([-clip, clip, 0.0, 3.0, -3.0], LENGTH) for cid in ids}
    inputs = {cid: quantizer.quantize(x, rng) for cid, x in floats.items()}
    r, total = run_round(protocol, ids, inputs, drop_share=[3], drop_masked=[7], drop_unmask=[11])
    expected = sum(np.clip(floats[cid], -clip, clip) for cid in r.server.survivors)
    np.testing.assert_allclose(quantizer.dequantize(total), expected, atol=1e-9)
