"""A client that advertises a low-order or non-canonical X25519 key, or another client's key in another form, is
refused at the advertise step and counted as dropped there; the round goes on for the rest."""

import dataclasses

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from secagg_rounds import LENGTH, Round, plain_sum, random_inputs

from secagg import ProtocolError, generate_keypair
from secagg.keys import key_problem

P = 2**255 - 19


def top_bit(key):
    return key[:31] + bytes([key[31] | 0x80])  # the same point: X25519 ignores bit 255


BAD_KEYS = {
    "all zero (order 2)": lambda key: bytes(32),
    "u = 1 (order 4)": lambda key: (1).to_bytes(32, "little"),
    "order 8": lambda key: bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    "top bit set": top_bit,
    "u = p (non-canonical 0)": lambda key: P.to_bytes(32, "little"),
    "u = p + 5": lambda key: (P + 5).to_bytes(32, "little"),
}


def advertise(r, tamper):
    """Every client advertises; `tamper` maps a client id to (field, function of its key). Returns the
    ProtocolError raised for each refused client, and builds the roster."""
    refused = {}
    for cid in r.config.participants:
        msg = r.clients[cid].advertise()
        if cid in tamper:
            field, change = tamper[cid]
            msg = dataclasses.replace(msg, **{field: change(getattr(msg, field))})
        try:
            r.server.receive_keys(msg)
        except ProtocolError as exc:
            refused[cid] = exc
    r.roster = r.server.roster()
    return refused


@pytest.mark.parametrize("protocol", ["dh", "secaggplus"])
def test_one_all_zero_and_one_non_canonical_key_are_refused_and_the_rest_get_their_exact_sum(protocol):
    ids = list(range(10))
    inputs = random_inputs(ids)
    r = Round(protocol, ids)
    refused = advertise(r, {2: ("cipher_public_key", BAD_KEYS["all zero (order 2)"]),
                            7: ("mask_public_key", top_bit)})
    assert sorted(refused) == [2, 7]
    assert sorted(r.server.rejected) == [2, 7]
    assert "low-order" in r.server.rejected[2] and "non-canonical" in r.server.rejected[7]
    assert [cid for cid, *_ in r.roster.keys] == [0, 1, 3, 4, 5, 6, 8, 9]
    r.share_keys()
    r.masked_input(inputs)
    total = r.unmask()
    rest = [0, 1, 3, 4, 5, 6, 8, 9]
    np.testing.assert_array_equal(total, plain_sum(inputs, rest, LENGTH))
    assert r.server.dropped_by_step == {"advertise": [2, 7], "share_keys": [], "masked_input": [], "unmask": []}
    assert not r.refused  # no honest client refused a step


@pytest.mark.parametrize("name", sorted(BAD_KEYS))
@pytest.mark.parametrize("field", ["cipher_public_key", "mask_public_key"])
def test_each_low_order_or_non_canonical_key_is_refused_at_advertise(name, field):
    r = Round("dh", list(range(5)))
    refused = advertise(r, {1: (field, BAD_KEYS[name])})
    assert list(refused) == [1] and "refused" in str(refused[1])
    assert list(r.server.rejected) == [1]
    assert 1 not in [cid for cid, *_ in r.roster.keys]


def test_another_clients_key_in_another_byte_form_is_refused():
    r = Round("dh", list(range(5)))
    first = r.clients[0].advertise()
    r.server.receive_keys(first)
    copy = dataclasses.replace(r.clients[1].advertise(), mask_public_key=top_bit(first.mask_public_key))
    with pytest.raises(ProtocolError, match="non-canonical"):
        r.server.receive_keys(copy)


def plus_order_2(key):
    """key + (0, 0), the point of order 2: u -> 1/u, canonical, and every agreement with it is key's own."""
    return pow(int.from_bytes(key, "little"), P - 2, P).to_bytes(32, "little")


def test_another_clients_key_plus_a_low_order_point_is_refused():
    r = Round("dh", list(range(5)))
    first = r.clients[0].advertise()
    r.server.receive_keys(first)
    twin = plus_order_2(first.mask_public_key)
    assert twin != first.mask_public_key and not key_problem(twin)
    sk, _ = generate_keypair()
    assert sk.exchange(X25519PublicKey.from_public_bytes(twin)) == \
        sk.exchange(X25519PublicKey.from_public_bytes(first.mask_public_key))
    other = r.clients[1].advertise()
    for field in ("cipher_public_key", "mask_public_key"):
        with pytest.raises(ProtocolError, match="it sent a public key another client already sent"):
            r.server.receive_keys(dataclasses.replace(other, **{field: twin}))
    with pytest.raises(ProtocolError, match="it sent a public key twice"):
        r.server.receive_keys(dataclasses.replace(other, mask_public_key=plus_order_2(other.cipher_public_key)))
    assert r.server.rejected[1] == "public key twice (the same for both agreements)"
    r.server.receive_keys(other)


def test_a_refused_advertisement_leaves_the_client_out_until_it_sends_valid_keys():
    r = Round("dh", list(range(5)))
    good = r.clients[1].advertise()
    with pytest.raises(ProtocolError, match="refused"):
        r.server.receive_keys(dataclasses.replace(good, cipher_public_key=bytes(32)))
    assert list(r.server.rejected) == [1]
    r.server.receive_keys(good)  # anyone may send a message under an id: a forgery must not lock it out
    assert not r.server.rejected


@pytest.mark.parametrize("name", ["top bit set", "u = p (non-canonical 0)"])
def test_a_client_refuses_a_roster_holding_a_non_canonical_key(name):
    r = Round("dh", list(range(5)))
    advertise(r, {})
    keys = list(r.roster.keys)
    cid, c_pk, s_pk = keys[1]
    keys[1] = (cid, c_pk, BAD_KEYS[name](s_pk))
    with pytest.raises(ProtocolError, match="non-canonical"):
        r.clients[0].share_keys(dataclasses.replace(r.roster, keys=tuple(keys)))
