"""The client's share-keys step refuses a roster it cannot trust: too few clients, its own keys
missing or swapped, duplicate, stranger or malformed entries."""

import dataclasses

import pytest
from secagg_rounds import Round, at_roster

from secagg import KeyRoster, ProtocolError, RoundAborted, generate_keypair


def with_keys(roster, keys):
    return dataclasses.replace(roster, keys=tuple(keys))


def test_the_client_refuses_a_roster_with_fewer_than_t_clients():
    r = at_roster()
    short = with_keys(r.roster, r.roster.keys[:2])  # clients 0, 1 of t = 3
    with pytest.raises(RoundAborted, match="fewer than t=3"):
        r.clients[0].share_keys(short)


def test_a_secaggplus_graph_spans_the_roster_only_so_absent_clients_leave_no_gap():
    ids = list(range(30))
    r = Round("secaggplus", ids)
    absent = {3, 8, 13, 21, 22, 29}
    r.advertise(drop=absent)
    r.share_keys()
    assert set(r.share_msgs) == set(ids) - absent  # nobody refused: every group keeps its k + 1
    for cid, msg in r.share_msgs.items():
        neighbours = r.clients[cid].graph.neighbours(cid)
        assert len(neighbours) == r.config.degree == 10 and not absent & set(neighbours)
        assert [v for v, _ in msg.shares] == list(neighbours)


def test_a_roster_without_the_clients_own_keys_is_refused():
    r = at_roster()
    without_me = with_keys(r.roster, r.roster.keys[1:])
    with pytest.raises(ProtocolError, match="does not list client 0"):
        r.clients[0].share_keys(without_me)


@pytest.mark.parametrize("which", [1, 2])
def test_a_roster_that_swaps_the_clients_own_key_is_refused(which):
    r = at_roster()
    _, attacker = generate_keypair()
    entry = list(r.roster.keys[0])
    entry[which] = attacker
    with pytest.raises(ProtocolError, match="keys client 0 advertised"):
        r.clients[0].share_keys(with_keys(r.roster, [tuple(entry), *r.roster.keys[1:]]))


def test_a_roster_listing_the_client_twice_is_refused():
    r = at_roster()
    doubled = with_keys(r.roster, [r.roster.keys[0], *r.roster.keys])
    with pytest.raises(ProtocolError, match="more than once"):
        r.clients[0].share_keys(doubled)


def test_a_roster_not_sorted_by_id_is_refused():
    r = at_roster()
    with pytest.raises(ProtocolError, match="not sorted"):
        r.clients[0].share_keys(with_keys(r.roster, reversed(r.roster.keys)))


def test_a_roster_listing_a_stranger_is_refused():
    r = at_roster()
    _, c = generate_keypair()
    _, s = generate_keypair()
    with pytest.raises(ProtocolError, match=r"\[9\] that are not participants"):
        r.clients[0].share_keys(with_keys(r.roster, [*r.roster.keys, (9, c, s)]))


@pytest.mark.parametrize("reuse", ["other client's key", "own key twice"])
def test_a_roster_with_a_duplicate_public_key_is_refused(reuse):
    r = at_roster()
    keys = list(r.roster.keys)
    cid, c_pk, s_pk = keys[1]
    keys[1] = (cid, keys[2][1], s_pk) if reuse == "other client's key" else (cid, c_pk, c_pk)
    with pytest.raises(ProtocolError, match="same public key twice"):
        r.clients[0].share_keys(with_keys(r.roster, keys))


@pytest.mark.parametrize("bad", [b"\x01" * 31, b"\x01" * 33, "not bytes"])
def test_a_roster_with_a_malformed_public_key_is_refused(bad):
    r = at_roster()
    keys = list(r.roster.keys)
    keys[1] = (1, keys[1][1], bad)
    with pytest.raises(ProtocolError, match="malformed public key"):
        r.clients[0].share_keys(with_keys(r.roster, keys))


@pytest.mark.parametrize("which", [1, 2])
def test_a_low_order_public_key_is_refused_before_anything_is_shared(which):
    r = at_roster()
    keys = list(r.roster.keys)
    entry = list(keys[1])
    entry[which] = bytes(32)  # a low-order point: the agreement would be all zeros
    keys[1] = tuple(entry)
    with pytest.raises(ProtocolError, match="malformed public key"):
        r.clients[0].share_keys(with_keys(r.roster, keys))


def test_roster_keys_are_checked_by_the_message_type():
    # KeyRoster entries are (id, c_pk, s_pk) triples; anything else is malformed
    r = at_roster()
    broken = KeyRoster(r.config.session, tuple((cid, c) for cid, c, _ in r.roster.keys))
    with pytest.raises(ProtocolError, match="malformed roster"):
        r.clients[0].share_keys(broken)
