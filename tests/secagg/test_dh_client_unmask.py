"""The client's unmask step answers only a consistent request: survivors and dropped disjoint, exactly
the clients that sent shares, itself a survivor, at least t survivors; never both shares of one peer."""

import pytest
from secagg_rounds import at_unmask

from secagg import ProtocolError, RoundAborted, UnmaskRequest


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
