"""The driver side of an exchange, without workers: replies taken in client-id order whichever worker sent them,
and a dead worker's clients told apart from clients that sent nothing."""
from collections import defaultdict

from fl.rounds.exchange import WORKER_DIED, Tally, exchange


class _Pool:
    """Each worker answers (its messages, its closing stats), or None if its actor died."""

    def __init__(self, replies: dict):
        self.replies = replies

    def call(self, step, calls, carried=None):
        return {w: self.replies[w] for w in calls}


def _exchange(replies: dict, clients: dict[int, list[int]], held: dict | None = None, stats=None) -> list:
    tally = Tally({}, defaultdict(float) if stats is None else stats, 0, {} if held is None else held, {})
    return list(exchange(_Pool(replies), None, {w: () for w in clients}, clients, tally))


def test_messages_are_taken_in_client_id_order_whichever_worker_holds_the_client():
    """Sums and state must not depend on the pool: worker 1 answers first in its list, worker 0 holds the largest
    and the smallest id."""
    clients = {0: [7, 0, 4], 1: [5, 2]}
    replies = {0: ([(7, b"g"), (0, b"a"), (4, b"e")], {}), 1: ([(5, b"f"), (2, b"c")], {})}
    assert _exchange(replies, clients) == [(0, b"a"), (2, b"c"), (4, b"e"), (5, b"f"), (7, b"g")]


def test_a_dead_workers_clients_are_told_apart_from_a_client_that_sent_nothing():
    """A plain round counts a dead worker's clients as dropped and a client that sent nothing (its update was not
    finite) as rejected: the exchange must say which."""
    out = dict(_exchange({0: ([(0, b"a"), (2, None)], {}), 1: None}, {0: [0, 2], 1: [1, 3]}))
    assert out[0] == b"a" and out[2] is None and out[1] is WORKER_DIED and out[3] is WORKER_DIED


def test_the_rows_state_bytes_cover_every_worker_also_those_a_round_does_not_call():
    """Each worker's last reported state is kept across rounds: a round that calls worker 0 only (or none, as a
    masked round whose clients all dropped) still counts worker 1's residuals."""
    held, stats = {0: 100, 1: 50}, defaultdict(float)
    _exchange({}, {}, held, stats)
    assert stats["state_bytes"] == 150
    stats = defaultdict(float)
    _exchange({0: ([(0, b"a")], {"state_bytes": 80})}, {0: [0]}, held, stats)
    assert stats["state_bytes"] == 130 and held == {0: 80, 1: 50}
