"""The client's masked-input step refuses a share bundle that fails AEAD or names the wrong sender or
recipient, lists a share twice or from a non-neighbour, or holds fewer than t senders."""

import dataclasses
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from secagg_rounds import IDS, LENGTH, at_bundles, zeros

from secagg import (
    AdvertiseKeys,
    Client,
    ProtocolError,
    RoundAborted,
    Server,
    ShareBundle,
    generate_keypair,
    make_round,
    session_id,
)
from secagg.keys import transport_keys


def tamper(bundle, index, ciphertext):
    shares = list(bundle.shares)
    shares[index] = (shares[index][0], ciphertext)
    return dataclasses.replace(bundle, shares=tuple(shares))


def test_an_altered_share_ciphertext_is_refused():
    r = at_bundles()
    bundle = r.bundles[0]
    ct = bytearray(bundle.shares[1][1])
    ct[20] ^= 1
    with pytest.raises(ProtocolError, match="failed to authenticate"):
        r.clients[0].masked_input(tamper(bundle, 1, bytes(ct)), zeros())


def test_a_ciphertext_relabelled_as_from_another_sender_is_refused():
    r = at_bundles()
    bundle = r.bundles[0]
    swapped = tamper(bundle, 0, bundle.shares[1][1])  # client 2's ciphertext presented as client 1's
    with pytest.raises(ProtocolError, match="failed to authenticate"):
        r.clients[0].masked_input(swapped, zeros())


def test_a_ciphertext_for_another_recipient_is_refused():
    r = at_bundles()
    for_client_1 = dict(r.bundles[1].shares)[2]
    with pytest.raises(ProtocolError, match="failed to authenticate"):
        r.clients[0].masked_input(tamper(r.bundles[0], 1, for_client_1), zeros())


@pytest.mark.parametrize("named", [(3, 0), (1, 3)])
def test_a_share_whose_plaintext_names_another_sender_or_recipient_is_refused(named):
    # A misbehaving client 1 encrypts, under the right key and associated data, a plaintext naming another pair.
    config = make_round("dh", session_id("run", 0, IDS), IDS, LENGTH)
    server = Server(config)
    honest = {cid: Client(config, cid) for cid in IDS if cid != 1}
    for client in honest.values():
        server.receive_keys(client.advertise())
    c_sk, c_pk = generate_keypair()
    _, s_pk = generate_keypair()
    server.receive_keys(AdvertiseKeys(config.session, 1, c_pk, s_pk))
    roster = server.roster()
    to_client_0 = [(cid, dict(honest[cid].share_keys(roster).shares)[0]) for cid in (2, 3, 4)]
    key, _ = transport_keys(c_sk, roster.keys[0][1], config.session, 1, 0)
    plaintext = struct.pack(">II", *named) + bytes(88)
    forged = AESGCM(key).encrypt(bytes(12), plaintext, config.session + struct.pack(">QQ", 1, 0))
    honest[0].share_keys(roster)
    bundle = ShareBundle(config.session, 0, ((1, forged), *to_client_0))
    with pytest.raises(ProtocolError, match=f"names sender {named[0]} and recipient {named[1]}"):
        honest[0].masked_input(bundle, zeros())


def test_a_bundle_addressed_to_another_client_is_refused():
    r = at_bundles()
    with pytest.raises(ProtocolError, match="addressed to client 1"):
        r.clients[0].masked_input(r.bundles[1], zeros())


def test_a_bundle_with_a_share_from_a_non_neighbour_or_twice_from_one_sender_is_refused():
    r = at_bundles()
    bundle = r.bundles[0]
    with pytest.raises(ProtocolError, match=r"\[0\], not neighbours"):
        r.clients[0].masked_input(dataclasses.replace(bundle, shares=((0, bundle.shares[0][1]), *bundle.shares)),
                                  zeros())
    r = at_bundles()
    bundle = r.bundles[0]
    with pytest.raises(ProtocolError, match="more than once"):
        r.clients[0].masked_input(dataclasses.replace(bundle, shares=bundle.shares + bundle.shares[-1:]), zeros())


def test_a_secaggplus_bundle_with_a_share_from_a_roster_client_outside_the_neighbourhood_is_refused():
    ids = list(range(20))  # k = 10: each client has 9 non-neighbours
    r = at_bundles("secaggplus", ids)
    stranger = next(v for v in ids[1:] if v not in r.server.graph.neighbours(0))
    ciphertext = r.share_msgs[stranger].shares[0][1]  # addressed to one of its own neighbours
    bundle = dataclasses.replace(r.bundles[0], shares=tuple(sorted((*r.bundles[0].shares, (stranger, ciphertext)))))
    with pytest.raises(ProtocolError, match=rf"\[{stranger}\], not neighbours"):
        r.clients[0].masked_input(bundle, zeros())


@pytest.mark.parametrize("entry", [(1,), (1, "text"), 1, (-1, b"x" * 112)])
def test_a_bundle_with_a_malformed_entry_is_refused(entry):
    r = at_bundles()
    bundle = r.bundles[0]
    with pytest.raises(ProtocolError, match="malformed entry"):
        r.clients[0].masked_input(dataclasses.replace(bundle, shares=(entry, *bundle.shares[1:])), zeros())


def test_a_bundle_with_fewer_than_t_senders_is_refused():
    r = at_bundles()
    bundle = r.bundles[0]
    with pytest.raises(RoundAborted, match="fewer than t=3"):
        r.clients[0].masked_input(dataclasses.replace(bundle, shares=bundle.shares[:1]), zeros())
