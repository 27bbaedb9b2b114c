"""SecAgg+ reveals only the survivors' total while they stay connected in the graph; a round whose survivors
split aborts before any share is released, and the graph is drawn from the advertised keys."""

import dataclasses
import os

import numpy as np
import pytest
from secagg_rounds import Round, plain_sum, random_inputs
from split_graph import part_sum_seen_by_server, public_neighbours, reference_components, ring_from_graph, split_pattern

from secagg import Graph, KeyRoster, ProtocolError, RoundAborted, UnmaskRequest, make_round, session_id

IDS = list(range(40))
DEGREE, T = 12, 7


def split_round(arc=7):
    """n = 40, k = 12, t = 7, two blocks of k/2 ring neighbours dropped before the masked input."""
    r = Round("secaggplus", IDS, degree=DEGREE, threshold=T)
    r.advertise()
    r.share_keys()
    ring = ring_from_graph(IDS, public_neighbours(r))
    dropped, part = split_pattern(ring, DEGREE, arc)
    return r, ring, dropped, part


def test_survivors_split_in_two_by_the_graph_abort_and_nothing_is_revealed():
    r, _, dropped, part = split_round()
    inputs = random_inputs(IDS)
    with pytest.raises(RoundAborted, match="not connected"):
        r.masked_input(inputs, drop=dropped)  # the server refuses to build the unmask request
    with pytest.raises(ProtocolError):
        r.server.result()
    # a server that skips its own check gets no share from any survivor
    survivors = tuple(sorted(set(IDS) - set(dropped)))
    assert len(survivors) == 28 and len(part) == 7
    forged = UnmaskRequest(session=r.config.session, survivors=survivors, dropped=tuple(dropped))
    for cid in survivors:
        with pytest.raises(RoundAborted, match="no shares revealed"):
            r.clients[cid].unmask(forged)
    assert not r.server._responses


def test_without_the_connectivity_check_the_split_round_leaks_the_small_arcs_exact_sum(monkeypatch):
    """The attack the check stops: with it switched off, the round completes and the server reads 7 inputs."""
    monkeypatch.setattr(Graph, "components", lambda self, members: [tuple(sorted(members))])
    r, _, dropped, part = split_round()
    inputs = random_inputs(IDS)
    r.masked_input(inputs, drop=dropped)
    survivors = sorted(set(IDS) - set(dropped))
    np.testing.assert_array_equal(r.unmask(), plain_sum(inputs, survivors, r.config.length))
    seen = part_sum_seen_by_server(r, part, public_neighbours(r))
    np.testing.assert_array_equal(seen, plain_sum(inputs, part, r.config.length))


def test_a_part_with_an_edge_to_other_survivors_stays_hidden():
    r, ring, _, _ = split_round()
    inputs = random_inputs(IDS)
    one_block = sorted(ring[7:7 + DEGREE // 2])  # a single cut leaves the ring connected
    r.masked_input(inputs, drop=one_block)
    total = r.unmask()
    survivors = sorted(set(IDS) - set(one_block))
    np.testing.assert_array_equal(total, plain_sum(inputs, survivors, r.config.length))
    arc = sorted(ring[:7])  # the same arc as in the split round, now with edges to survivors outside it
    seen = part_sum_seen_by_server(r, arc, public_neighbours(r))
    assert not np.array_equal(seen, plain_sum(inputs, arc, r.config.length))


@pytest.mark.parametrize("seed", range(3))
def test_random_dropouts_abort_when_the_survivors_disconnect_and_give_the_exact_sum_otherwise(seed):
    rng = np.random.default_rng(seed)
    inputs = random_inputs(IDS, seed=seed)
    verdicts = set()
    for i in range(8):
        r = Round("secaggplus", IDS, degree=DEGREE, threshold=T)
        r.advertise()
        r.share_keys()
        neighbours = public_neighbours(r)
        ring = ring_from_graph(IDS, neighbours)
        start, gap = int(rng.integers(40)), int(rng.integers(7, 27))
        size = DEGREE // 2 - (i % 2)  # k/2 cuts the ring, k/2 - 1 does not
        blocks = [ring[(start + j) % 40] for j in range(size)] + [ring[(start + gap + j) % 40] for j in range(size)]
        dropped = sorted(set(blocks))
        survivors = sorted(set(IDS) - set(dropped))
        split = len(reference_components(neighbours, survivors)) > 1
        try:
            r.masked_input(inputs, drop=dropped)
        except RoundAborted as exc:
            assert split and "not connected" in str(exc), (dropped, exc)
            verdicts.add("split")
            continue
        assert not split
        try:
            total = r.unmask()
        except RoundAborted:  # a neighbourhood fell below t: allowed, never a wrong sum
            continue
        np.testing.assert_array_equal(total, plain_sum(inputs, survivors, r.config.length))
        verdicts.add("exact")
    assert verdicts == {"split", "exact"}


def roster(config, keys=None):
    keys = keys or {cid: (os.urandom(32), os.urandom(32)) for cid in config.participants}
    return KeyRoster(config.session, tuple((cid, *keys[cid]) for cid in sorted(keys))), keys


def test_the_graph_is_drawn_from_the_advertised_keys_and_differs_when_any_key_differs():
    config = make_round("secaggplus", session_id("run", 0, IDS), IDS, 10, T, DEGREE)
    base, keys = roster(config)
    graph = config.graph(base)
    assert graph.neighbours(0) == config.graph(base).neighbours(0)  # the same roster: the same graph
    for cid, which in [(0, 0), (17, 1), (39, 0)]:
        changed = dict(keys)
        pair = list(changed[cid])
        pair[which] = os.urandom(32)
        changed[cid] = tuple(pair)
        other = config.graph(roster(config, changed)[0])
        assert [other.neighbours(u) for u in IDS] != [graph.neighbours(u) for u in IDS]


def test_every_client_derives_the_servers_graph_from_the_roster():
    r = Round("secaggplus", IDS, degree=DEGREE, threshold=T)
    r.advertise()
    r.share_keys()
    for cid, client in r.clients.items():
        assert client.graph.ring == r.server.graph.ring
        assert dict(r.share_msgs[cid].shares).keys() == set(r.server.graph.neighbours(cid))


def test_a_client_refuses_an_unmask_request_listing_a_survivor_not_in_the_roster():
    r = Round("secaggplus", IDS, degree=DEGREE, threshold=T)
    for cid in IDS[1:]:
        r.server.receive_keys(r.clients[cid].advertise())
    r.roster = r.server.roster()
    r.share_keys()
    r.masked_input(random_inputs(IDS))
    request = dataclasses.replace(r.request, survivors=(0, *r.request.survivors))
    with pytest.raises(ProtocolError, match=r"\[0\] that are not in the roster"):
        r.clients[1].unmask(request)
