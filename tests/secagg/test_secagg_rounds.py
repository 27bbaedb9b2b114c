"""Whole rounds: the unmasked sum is exactly the survivors' plain sum under dropouts; below t nothing is revealed."""

from dataclasses import dataclass

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
    assert r.server.dropped_by_step == {"advertise": [], "share_keys": [], "masked_input": [], "unmask": []}


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
        assert r.server.dropped_by_step == {"advertise": [], "share_keys": sorted(drop_share),
                                            "masked_input": sorted(drop_masked), "unmask": sorted(drop_unmask)}
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


@dataclass(frozen=True)
class Outcome:
    """What a round must do under one dropout pattern: the step whose server call aborts (None: the round
    completes), the survivors U3, the clients that refuse a step, and the owners of the secrets left short."""

    aborts_at: str | None
    survivors: frozenset = frozenset()
    refused: frozenset = frozenset()
    short: frozenset = frozenset()
    unneeded: frozenset = frozenset()  # dropped after sending shares, no neighbour survives: key not rebuilt
    split: bool = False  # U3 is not connected in the graph


def connected(graph, members):
    """Whether the graph restricted to `members` is connected (a plain search, independent of Graph)."""
    members = set(members)
    seen, stack = set(), [min(members)]
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack += [v for v in graph.neighbours(u) if v in members]
    return seen == members


def expected_outcome(graph, t, drop_share, drop_masked, drop_unmask):
    """The outcome from the public graph of the round (drawn from its roster) and t alone.

    Every client advertises, so the roster lists each whole group of k + 1 and nobody refuses the roster. Then,
    with group(u) = u and its neighbours (the holders of shares of u's secrets):
      1. U2 = the clients that send shares; the server aborts at `bundles` if |U2| < t.
      2. A client of U2 asked for its masked input refuses when its bundle (its neighbours in U2) plus itself
         is fewer than t. U3 = the clients of U2 that neither drop nor refuse; the server aborts at
         `unmask_request` if |U3| < t or U3 is not connected in the graph.
      3. A client of U3 asked to unmask refuses when group(v) holds fewer than t clients of U3. R = the clients
         of U3 that neither drop nor refuse. The server aborts at `result` exactly when some secret it must
         rebuild has fewer than t holders in R: the self-mask seed b_u of every u in U3, and the mask key of every
         u in U2 \\ U3 that has a neighbour in U3 (whose pairwise mask with u is in the sum). Otherwise the result
         is the exact field sum of the inputs of U3.
    """
    group = {u: {u, *graph.neighbours(u)} for u in graph.nodes}
    u2 = set(graph.nodes) - set(drop_share)
    if len(u2) < t:
        return Outcome("bundles")
    refused_masked = {v for v in u2 - set(drop_masked) if len(group[v] & u2) < t}
    u3 = u2 - set(drop_masked) - refused_masked
    if len(u3) < t:
        return Outcome("unmask_request", frozenset(u3), frozenset(refused_masked))
    if not connected(graph, u3):
        return Outcome("unmask_request", frozenset(u3), frozenset(refused_masked), split=True)
    refused_unmask = {v for v in u3 - set(drop_unmask) if len(group[v] & u3) < t}
    responders = u3 - set(drop_unmask) - refused_unmask
    unneeded = {u for u in u2 - u3 if not (group[u] - {u}) & u3}
    short = {u for u in u3 | (u2 - u3 - unneeded) if len(group[u] & responders) < t}
    return Outcome("result" if short else None, frozenset(u3), frozenset(refused_masked | refused_unmask),
                   frozenset(short), frozenset(unneeded))


def observed_outcome(r, inputs, drop_share, drop_masked, drop_unmask):
    """(the step whose server call raised RoundAborted or None, that RoundAborted or the result) of driving `r`
    (advertised) through the pattern."""
    steps = [("bundles", lambda: r.share_keys(drop_share)),
             ("unmask_request", lambda: r.masked_input(inputs, drop_masked)),
             ("result", lambda: r.unmask(drop_unmask))]
    for step, call in steps:
        try:
            result = call()
        except RoundAborted as exc:
            return step, exc
    return None, result


def heavy_pattern(rng, graph, i):
    """A dropout pattern that overwhelms t somewhere (kind i % 5): spread over the cohort; inside one
    neighbourhood; u dropping after sending shares while the neighbours of u outside group(w), for some
    neighbour w of u, drop too (u's mask key loses its holders, though every survivor's group may not); u's
    neighbours dropping before sending shares (u, with an empty bundle, refuses its masked input; no survivor
    was masked with u, so u's key is not needed); two blocks of k/2 ring neighbours dropping before the masked
    input (the survivors split in two parts)."""
    ids = list(graph.nodes)
    victim = int(rng.choice(ids))
    neighbours = list(graph.neighbours(victim))
    if i % 5 == 0:
        return random_pattern(rng, ids, int(rng.integers(1, len(ids) - 1)))
    if i % 5 == 1:
        gone = rng.choice(neighbours, size=int(rng.integers(1, len(neighbours) + 1)), replace=False)
        return random_pattern(rng, [int(g) for g in gone], len(gone))
    if i % 5 == 2:
        def outside(w):
            return sorted(set(neighbours) - {w, *graph.neighbours(w)})
        gone = outside(max(neighbours, key=lambda w: len(outside(w))))
        early = [v for v in gone if rng.integers(2)]
        return early, [victim, *sorted(set(gone) - set(early))], []
    if i % 5 == 3:
        return neighbours, [], []
    m, h = len(ids), len(neighbours) // 2
    start, gap = int(rng.integers(m)), int(rng.integers(h + 1, max(h + 2, m - h)))
    cut = {graph.ring[(start + j) % m] for j in range(h)} | {graph.ring[(start + gap + j) % m] for j in range(h)}
    return [], sorted(cut), []


@pytest.mark.parametrize("n", SIZES)
def test_secaggplus_aborts_exactly_when_a_secret_to_rebuild_loses_its_t_holders_or_survivors_split(n):
    """Heavy dropout: the server aborts the unmask request when the survivors are not connected in the graph,
    and the result exactly when the self-mask seed of a survivor, or the mask key of a dropped client with a
    surviving neighbour, has fewer than t unmask responders among its owner and the owner's neighbours (the
    earlier steps abort when fewer than t clients remain; see expected_outcome). Otherwise the result is the
    exact field sum of the survivors' vectors."""
    ids = list(range(n))
    rng = np.random.default_rng(200 + n)
    inputs = random_inputs(ids, seed=n)
    seen = []
    for i in range(40):
        r = Round("secaggplus", ids)
        r.advertise()
        cfg, graph = r.config, r.server.graph  # the graph is drawn from this round's roster
        pattern = heavy_pattern(rng, graph, i)
        expected = expected_outcome(graph, cfg.threshold, *pattern)
        aborts_at, outcome = observed_outcome(r, inputs, *pattern)
        assert aborts_at == expected.aborts_at, (pattern, expected)
        assert set(r.refused) == expected.refused, pattern
        if expected.aborts_at in (None, "result") or expected.split:
            assert r.server.survivors == tuple(sorted(expected.survivors))
        if expected.split:
            assert "not connected" in str(outcome)
        if aborts_at is None:
            np.testing.assert_array_equal(outcome, plain_sum(inputs, sorted(expected.survivors), LENGTH))
        else:
            if aborts_at == "result":  # the threshold check itself refuses, naming exactly the short secrets
                assert f"shares of the secrets of clients {sorted(expected.short)}" in str(outcome), pattern
                silent = expected.survivors & (set(pattern[2]) | expected.refused)  # no unmask response
                assert outcome.missing == tuple(sorted(silent)) and r.server.dropped_by_step["unmask"] == sorted(silent)
            with pytest.raises(ProtocolError):
                r.server.result()  # an aborted round never yields a sum
        seen.append(expected)
    steps = {e.aborts_at for e in seen}
    assert None in steps and "result" in steps  # both verdicts of the final check are exercised
    if not cfg.full_graph:  # a neighbourhood falls short though most of the cohort survives
        assert any(e.aborts_at == "result" and len(e.survivors) > n // 2 for e in seen)
    if cfg.n >= 2 * cfg.group_size:  # only a dropped client's mask key is short: every survivor's group keeps t
        assert any(e.aborts_at == "result" and not e.short & e.survivors for e in seen)
        assert any(e.aborts_at is None and e.unneeded and e.refused for e in seen)  # u's group gone, round completes
        assert any(e.split and len(e.survivors) > n // 2 for e in seen)  # most survive, yet split in two


def test_secaggplus_aborts_when_a_neighbourhood_falls_below_t_though_most_clients_survive():
    ids = list(range(30))
    r = Round("secaggplus", ids)
    cfg = r.config
    assert cfg.degree == 10 and cfg.threshold == 6
    victim = 0
    r.advertise()
    r.share_keys()
    gone = list(r.server.graph.neighbours(victim))[: cfg.degree // 2 + 1]  # 6 of its 10: 5 of 11 holders left
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
