"""Every message is bound to its round's session: replayed into another round, it is refused."""

import dataclasses

import pytest
from secagg_rounds import IDS, Round, random_inputs, zeros

from secagg import Client, ProtocolError


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
