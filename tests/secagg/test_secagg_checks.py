"""Every check fails closed: each test feeds one bad message and sees it refused."""

import dataclasses
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from secagg_rounds import LENGTH, Round, plain_sum, random_inputs

from secagg import (
    AdvertiseKeys,
    Client,
    KeyRoster,
    MaskedInput,
    ProtocolError,
    RoundAborted,
    Server,
    ShareBundle,
    UnmaskRequest,
    generate_keypair,
    make_round,
    session_id,
)
from secagg.keys import transport_keys

IDS = list(range(5))  # t = 3


def zeros(length=LENGTH):
    return np.zeros(length, dtype=np.uint32)


def at_roster(protocol="dh", ids=IDS):
    r = Round(protocol, ids)
    r.advertise()
    return r


def at_bundles(protocol="dh", ids=IDS, drop=()):
    r = at_roster(protocol, ids)
    r.share_keys(drop)
    return r


def at_unmask(protocol="dh", ids=IDS, drop_share=(), drop_masked=(), inputs=None):
    r = at_bundles(protocol, ids, drop_share)
    r.masked_input(inputs or random_inputs(ids), drop_masked)
    return r


def with_keys(roster, keys):
    return dataclasses.replace(roster, keys=tuple(keys))


# --- fewer than t participants -----------------------------------------------------------------


def test_the_client_refuses_a_roster_with_fewer_than_t_clients():
    r = at_roster()
    short = with_keys(r.roster, r.roster.keys[:2])  # clients 0, 1 of t = 3
    with pytest.raises(RoundAborted, match="fewer than t=3"):
        r.clients[0].share_keys(short)


def test_a_secaggplus_client_refuses_a_roster_with_fewer_than_t_of_its_neighbourhood():
    ids = list(range(30))
    r = at_roster("secaggplus", ids)
    gone = set(r.config.neighbours(0)[:6])  # 5 of its 11-member group remain; t = 6
    short = with_keys(r.roster, [e for e in r.roster.keys if e[0] not in gone])
    assert len(short.keys) == 24
    with pytest.raises(RoundAborted, match="fewer than t=6"):
        r.clients[0].share_keys(short)


def test_the_server_refuses_to_build_a_roster_for_fewer_than_t_clients():
    r = Round("dh", IDS)
    for cid in (0, 1):
        r.server.receive_keys(r.clients[cid].advertise())
    with pytest.raises(RoundAborted, match="fewer than t=3") as info:
        r.server.roster()
    assert info.value.missing == (2, 3, 4)


# --- the roster: own keys, duplicates, malformed keys ------------------------------------------


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


def test_the_server_refuses_duplicate_or_malformed_advertised_keys():
    r = Round("dh", IDS)
    msg = r.clients[0].advertise()
    r.server.receive_keys(msg)
    with pytest.raises(ProtocolError, match="twice"):
        r.server.receive_keys(msg)
    other = r.clients[1].advertise()
    with pytest.raises(ProtocolError, match="already sent"):
        r.server.receive_keys(dataclasses.replace(other, mask_public_key=msg.cipher_public_key))
    with pytest.raises(ProtocolError, match="same public key twice"):
        r.server.receive_keys(dataclasses.replace(other, mask_public_key=other.cipher_public_key))
    with pytest.raises(ProtocolError, match="malformed"):
        r.server.receive_keys(dataclasses.replace(other, cipher_public_key=other.cipher_public_key[:31]))
    with pytest.raises(ProtocolError, match="not a participant"):
        r.server.receive_keys(dataclasses.replace(other, client_id=99))
    r.server.receive_keys(other)  # the genuine message still goes through


# --- wrong session: every message of a round replayed into another round ------------------------


def two_rounds():
    old, new = Round("dh", IDS, round=0), Round("dh", IDS, round=1)
    inputs = random_inputs(IDS)
    for r in (old, new):
        r.advertise()
        r.share_keys()
        r.masked_input(inputs)
    return old, new


def test_every_message_replayed_from_another_round_is_refused():
    old, new = two_rounds()  # both rounds wait for unmask responses
    fresh = Round("dh", IDS, round=1)
    with pytest.raises(ProtocolError, match="different session"):
        fresh.server.receive_keys(Client(old.config, 1).advertise())
    fresh.advertise()
    with pytest.raises(ProtocolError, match="different session"):
        fresh.server.receive_shares(old.share_msgs[1])
    with pytest.raises(ProtocolError, match="different session"):
        new.server.add(old.masked_msgs[0])
    with pytest.raises(ProtocolError, match="different session"):
        new.server.receive_unmask(old.clients[0].unmask(old.request))
    with pytest.raises(ProtocolError, match="different session"):
        new.clients[1].unmask(old.request)


def test_a_roster_or_bundle_from_another_round_is_refused_by_the_client():
    old, new = Round("dh", IDS, round=0), Round("dh", IDS, round=1)
    old.advertise()
    new.advertise()
    with pytest.raises(ProtocolError, match="different session"):
        new.clients[0].share_keys(old.roster)
    old.share_keys()
    new = Round("dh", IDS, round=1)
    new.advertise()
    new.share_keys()
    with pytest.raises(ProtocolError, match="different session"):
        new.clients[0].masked_input(old.bundles[0], zeros())


def test_a_ciphertext_from_another_round_fails_to_authenticate():
    old, new = Round("dh", IDS, round=0), Round("dh", IDS, round=1)
    for r in (old, new):
        r.advertise()
        r.share_keys()
    spliced = dataclasses.replace(old.bundles[0], session=new.config.session)
    with pytest.raises(ProtocolError, match="authenticate"):
        new.clients[0].masked_input(spliced, zeros())


# --- the share bundle: AEAD, sender and recipient -----------------------------------------------


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


def test_a_share_whose_plaintext_names_another_sender_or_recipient_is_refused():
    # A misbehaving client 1 encrypts, under the right key and associated data, a plaintext naming (3, 0).
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
    plaintext = struct.pack(">II", 3, 0) + bytes(88)
    forged = AESGCM(key).encrypt(bytes(12), plaintext, config.session + struct.pack(">QQ", 1, 0))
    honest[0].share_keys(roster)
    bundle = ShareBundle(config.session, 0, ((1, forged), *to_client_0))
    with pytest.raises(ProtocolError, match="names sender 3 and recipient 0"):
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


def test_the_server_refuses_shares_to_the_wrong_recipients_or_of_the_wrong_size():
    r = at_roster()
    msg = r.clients[0].share_keys(r.roster)
    with pytest.raises(ProtocolError, match="expected its neighbours"):
        r.server.receive_shares(dataclasses.replace(msg, shares=msg.shares[1:]))
    with pytest.raises(ProtocolError, match="expected its neighbours"):
        r.server.receive_shares(dataclasses.replace(msg, shares=((0, msg.shares[0][1]), *msg.shares)))
    short = tuple((v, ct[:-1]) for v, ct in msg.shares)
    with pytest.raises(ProtocolError, match="112 bytes"):
        r.server.receive_shares(dataclasses.replace(msg, shares=short))
    r.server.receive_shares(msg)
    with pytest.raises(ProtocolError, match="twice"):
        r.server.receive_shares(msg)


def test_the_server_refuses_shares_from_a_client_that_did_not_advertise():
    r = Round("dh", IDS)
    for cid in IDS[:4]:
        r.server.receive_keys(r.clients[cid].advertise())
    roster = r.server.roster()
    late = r.clients[4]
    late.advertise()
    forged = dataclasses.replace(r.clients[0].share_keys(roster), client_id=4)
    with pytest.raises(ProtocolError, match="did not advertise"):
        r.server.receive_shares(forged)


# --- the unmask request -------------------------------------------------------------------------


def request(r, survivors, dropped):
    return UnmaskRequest(session=r.config.session, survivors=tuple(survivors), dropped=tuple(dropped))


def test_a_survivor_list_naming_a_client_that_sent_no_shares_is_refused():
    r = at_unmask(drop_share=[4])
    with pytest.raises(ProtocolError, match=r"\[4\] that sent no shares"):
        r.clients[0].unmask(request(r, [0, 1, 2, 3, 4], []))
    r = at_unmask(drop_share=[4])
    with pytest.raises(ProtocolError, match=r"\[4\] that sent no shares"):
        r.clients[0].unmask(request(r, [0, 1, 2], [3, 4]))  # nor may it be "dropped": no masks with it exist


def test_an_unmask_request_listing_the_client_as_dropped_or_not_at_all_is_refused():
    r = at_unmask()
    with pytest.raises(ProtocolError, match="does not list client 0 as a survivor"):
        r.clients[0].unmask(request(r, [1, 2, 3, 4], [0]))
    r = at_unmask()
    with pytest.raises(ProtocolError, match="does not list client 0 as a survivor"):
        r.clients[0].unmask(request(r, [1, 2, 3, 4], []))


def test_an_unmask_request_leaving_out_a_client_that_sent_shares_is_refused():
    r = at_unmask()
    with pytest.raises(ProtocolError, match="neither survivor nor dropped"):
        r.clients[0].unmask(request(r, [0, 1, 2, 3], []))


def test_a_request_for_both_shares_of_one_peer_is_never_answered():
    r = at_unmask()
    with pytest.raises(ProtocolError, match=r"both shares of clients \[3\]"):
        r.clients[0].unmask(request(r, [0, 1, 2, 3, 4], [3]))
    # nor across two messages: the first answers for 3 as a survivor, the second (3 dropped) is refused
    r = at_unmask()
    first = r.clients[0].unmask(request(r, [0, 1, 2, 3, 4], []))
    assert 3 in dict(first.self_mask_shares) and not first.key_shares
    with pytest.raises(ProtocolError, match="out of order"):
        r.clients[0].unmask(request(r, [0, 1, 2, 4], [3]))


def test_a_refused_unmask_request_is_not_retried():
    r = at_unmask()
    with pytest.raises(ProtocolError):
        r.clients[0].unmask(request(r, [0, 1, 2, 3, 4], [3]))
    with pytest.raises(ProtocolError, match="out of order"):
        r.clients[0].unmask(request(r, [0, 1, 2, 3, 4], []))


def test_a_client_refuses_an_unmask_request_with_fewer_than_t_survivors():
    r = at_unmask()
    with pytest.raises(RoundAborted, match="no shares revealed"):
        r.clients[0].unmask(request(r, [0, 1], [2, 3, 4]))


def test_the_server_refuses_unmask_responses_with_the_wrong_shares():
    r = at_unmask(drop_masked=[4])
    response = r.clients[0].unmask(r.request)
    assert [w for w, _ in response.key_shares] == [4]
    bad = [
        dataclasses.replace(response, self_mask_shares=response.self_mask_shares[1:]),
        dataclasses.replace(response, key_shares=()),
        dataclasses.replace(response, key_shares=response.key_shares + ((3, response.key_shares[0][1]),)),
        dataclasses.replace(response, key_shares=((4, b"\xff" * 44),)),  # values outside the field
        dataclasses.replace(response, key_shares=((4, b"\x00" * 43),)),
        dataclasses.replace(response, client_id=4),  # not a survivor
    ]
    for msg in bad:
        with pytest.raises(ProtocolError):
            r.server.receive_unmask(msg)
    r.server.receive_unmask(response)
    with pytest.raises(ProtocolError, match="twice"):
        r.server.receive_unmask(response)


# --- masked inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", [zeros(LENGTH - 1), zeros(LENGTH + 1), np.zeros((2, LENGTH // 2), np.uint32),
                                    np.zeros(LENGTH, np.int64), [0] * LENGTH])
def test_a_masked_vector_of_the_wrong_length_or_dtype_is_refused(vector):
    r = at_bundles()
    with pytest.raises(ProtocolError, match="shape|uint32"):
        r.server.add(MaskedInput(session=r.config.session, client_id=0, masked=vector))
    with pytest.raises(ProtocolError, match="shape|uint32"):
        r.clients[0].masked_input(r.bundles[0], vector)


def test_a_masked_input_from_a_client_that_sent_no_shares_is_refused():
    r = at_bundles(drop=[4])
    with pytest.raises(ProtocolError, match="not in U2"):
        r.server.add(MaskedInput(session=r.config.session, client_id=4, masked=zeros()))


def test_a_duplicate_masked_input_is_refused():
    r = at_bundles()
    msg = r.clients[0].masked_input(r.bundles[0], zeros())
    r.server.add(msg)
    with pytest.raises(ProtocolError, match="twice"):
        r.server.add(msg)


def test_a_late_masked_input_from_a_dropped_client_is_ignored_and_counted():
    inputs = random_inputs(IDS)
    r = at_bundles()
    late = None
    for cid, bundle in r.bundles.items():
        msg = r.clients[cid].masked_input(bundle, inputs[cid])
        if cid == 4:
            late = msg
        else:
            r.server.add(msg)
    r.request = r.server.unmask_request()
    assert r.request.dropped == (4,)
    r.server.add(late)
    assert r.server.late_ignored == 1
    total = r.unmask()
    np.testing.assert_array_equal(total, plain_sum(inputs, [0, 1, 2, 3], LENGTH))
    r.server.add(late)  # also after the result
    assert r.server.late_ignored == 2


def test_masked_inputs_before_the_bundles_are_refused():
    r = at_roster()
    with pytest.raises(ProtocolError, match="unexpected masked input"):
        r.server.add(MaskedInput(session=r.config.session, client_id=0, masked=zeros()))


# --- reconstruction -----------------------------------------------------------------------------


def test_a_rebuilt_mask_key_that_does_not_match_its_public_key_aborts_the_round():
    r = at_roster()
    cheat = r.clients[4]
    cheat._s_sk, _ = generate_keypair()  # shares a mask key other than the one it advertised
    r.share_keys()
    r.masked_input(random_inputs(IDS), drop=[4])
    with pytest.raises(RoundAborted, match="mask key of client 4 does not match"):
        r.unmask()


def test_an_altered_key_share_aborts_the_round_instead_of_a_wrong_sum():
    r = at_unmask(drop_masked=[4])
    responses = [r.clients[cid].unmask(r.request) for cid in IDS[:3]]
    (owner, share), = responses[0].key_shares
    altered = share[:4] + bytes([share[4] ^ 1]) + share[5:]  # lands in key byte 5 (X25519 clamps bytes 0, 31)
    responses[0] = dataclasses.replace(responses[0], key_shares=((owner, altered),))
    for msg in responses:  # exactly t: the altered share is used
        r.server.receive_unmask(msg)
    with pytest.raises(RoundAborted, match="client 4"):
        r.server.result()


# --- order of steps -----------------------------------------------------------------------------


def test_each_client_step_runs_once_and_in_order():
    r = at_roster()
    client = r.clients[0]
    with pytest.raises(ProtocolError, match="out of order"):
        client.advertise()
    with pytest.raises(ProtocolError, match="out of order"):
        client.masked_input(ShareBundle(r.config.session, 0, ()), zeros())
    fresh = Client(r.config, 1)
    with pytest.raises(ProtocolError, match="out of order"):
        fresh.share_keys(r.roster)


def test_a_failed_step_ends_the_clients_round():
    r = at_roster()
    with pytest.raises(ProtocolError):
        r.clients[0].share_keys(dataclasses.replace(r.roster, session=bytes(32)))
    with pytest.raises(ProtocolError, match="out of order"):
        r.clients[0].share_keys(r.roster)


def test_server_steps_out_of_order_are_refused():
    r = Round("dh", IDS)
    with pytest.raises(ProtocolError, match="unexpected"):
        r.server.bundles()
    with pytest.raises(ProtocolError, match="unexpected"):
        r.server.unmask_request()
    with pytest.raises(ProtocolError, match="unexpected"):
        r.server.result()
    r.advertise()
    with pytest.raises(ProtocolError, match="unexpected advertised keys"):
        r.server.receive_keys(AdvertiseKeys(r.config.session, 0, b"a" * 32, b"b" * 32))


def test_client_and_server_need_a_round_config():
    with pytest.raises(TypeError, match="RoundConfig"):
        Server(session_id("run", 0, IDS))
    config = make_round("dh", session_id("run", 0, IDS), IDS, LENGTH)
    with pytest.raises(ValueError, match="not a participant"):
        Client(config, 7)


def test_roster_keys_are_checked_by_the_message_type():
    # KeyRoster entries are (id, c_pk, s_pk) triples; anything else is malformed
    r = at_roster()
    broken = KeyRoster(r.config.session, tuple((cid, c) for cid, c, _ in r.roster.keys))
    with pytest.raises(ProtocolError, match="malformed roster"):
        r.clients[0].share_keys(broken)


def test_an_unmask_response_to_a_round_that_aborted_is_refused():
    r = at_unmask()
    responses = [r.clients[cid].unmask(r.request) for cid in IDS]
    r.server.receive_unmask(responses[0])
    with pytest.raises(RoundAborted):
        r.server.result()
    with pytest.raises(ProtocolError, match="aborted"):
        r.server.receive_unmask(responses[1])
