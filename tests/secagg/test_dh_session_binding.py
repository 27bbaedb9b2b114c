"""Every message is bound to its round's session: replayed into another round, it is refused."""

import dataclasses

import numpy as np
import pytest
from secagg_rounds import IDS, Round, random_inputs, zeros

from secagg import Client, ProtocolError, session_id


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


# --- the session binds the round's configuration and the server's nonce ---------------------------------


def bound(protocol="secaggplus", length=64, threshold=None, degree=None, nonce=b"nonce-a"):
    return session_id("run", 0, IDS, protocol=protocol, length=length, threshold=threshold, degree=degree,
                      nonce=nonce)


def test_the_session_binds_protocol_threshold_degree_length_and_nonce():
    base = bound()
    assert len(base) == 32 and base == bound()
    assert bound(threshold=3, degree=4) == base  # the defaults make_round resolves for 5 clients
    assert bound(protocol="SecAggPlusProtocol") == base  # an alias names the same protocol
    others = [bound(protocol="dh"), bound(length=65), bound(threshold=4), bound(degree=2), bound(nonce=b"nonce-b"),
              bound(nonce=None), session_id("run", 0, IDS)]
    assert len({base, *others}) == 1 + len(others)
    assert session_id("run", 0, IDS, nonce=b"x") != session_id("run", 0, IDS)


def test_the_session_binds_the_field_width():
    """(A message from a session of another width is refused: the test of another configuration below.)"""
    widths = [session_id("run", 0, IDS, protocol="dh", length=64, bits=b) for b in (None, 20, 21, 32)]
    assert len(set(widths)) == 4
    # a numpy width, as FixedPointQuantizer takes one, binds as the same int
    assert session_id("run", 0, IDS, protocol="dh", length=64, bits=np.int64(20)) == widths[1]


@pytest.mark.parametrize("kw,match", [({"nonce": "text"}, "nonce"), ({"protocol": "dh"}, "length"),
                                      ({"length": 64}, "protocol"), ({"protocol": "none", "length": 64}, "mask"),
                                      ({"bits": 1}, r"\[2, 32\]"), ({"bits": 33}, r"\[2, 32\]"),
                                      ({"bits": 20.0}, r"\[2, 32\]"),
                                      # a configuration make_round refuses, refused here too
                                      ({"protocol": "dh", "length": 64, "threshold": 1}, "< 2"),
                                      ({"protocol": "dh", "length": 64, "threshold": -1}, "< 2"),
                                      ({"protocol": "dh", "length": 64, "threshold": True}, "integer"),
                                      ({"protocol": "secaggplus", "length": 64, "degree": 3}, "degree"),
                                      ({"protocol": "secaggplus", "length": 64, "degree": -2}, "degree")])
def test_session_binding_inputs_are_checked(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        session_id("run", 0, IDS, **kw)


@pytest.mark.parametrize("run,round", [(5, 0), ("run", -1), ("run", True), ("run", 1.5), ("run", 2**64)])
def test_a_run_id_that_is_no_str_or_a_round_that_is_no_integer_is_refused(run, round):
    with pytest.raises((TypeError, ValueError), match="run_id must be a str|round must be an integer"):
        session_id(run, round, IDS)


@pytest.mark.parametrize("change", [{"nonce": b"nonce-b"}, {"threshold": 4}, {"degree": 2}, {"length": 65},
                                    {"bits": 21}])
def test_a_message_from_a_session_with_another_nonce_or_configuration_is_refused(change):
    setting = {"protocol": "secaggplus", "length": 64, "threshold": None, "degree": None, "nonce": b"nonce-a",
               "bits": 20}
    old = Round(**{**setting, "ids": IDS})
    new = Round(**{**setting, **change, "ids": IDS})
    assert old.config.session != new.config.session
    with pytest.raises(ProtocolError, match="different session"):
        new.server.receive_keys(Client(old.config, 1).advertise())
    old.advertise()
    new.advertise()
    with pytest.raises(ProtocolError, match="different session"):
        new.clients[0].share_keys(old.roster)
    old.share_keys()
    with pytest.raises(ProtocolError, match="different session"):
        new.server.receive_shares(old.share_msgs[1])
