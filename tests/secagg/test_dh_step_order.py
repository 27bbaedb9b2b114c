"""Both state machines need a RoundConfig and run each step once, in order; after a failed or aborted step
the round takes no more input."""

import dataclasses

import pytest
from secagg_rounds import IDS, LENGTH, Round, at_roster, at_unmask, zeros

from secagg import (
    AdvertiseKeys,
    Client,
    ProtocolError,
    RoundAborted,
    Server,
    ShareBundle,
    make_round,
    session_id,
)


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


def test_an_unmask_response_to_a_round_that_aborted_is_refused():
    r = at_unmask()
    responses = [r.clients[cid].unmask(r.request) for cid in IDS]
    r.server.receive_unmask(responses[0])
    with pytest.raises(RoundAborted):
        r.server.result()
    with pytest.raises(ProtocolError, match="aborted"):
        r.server.receive_unmask(responses[1])
