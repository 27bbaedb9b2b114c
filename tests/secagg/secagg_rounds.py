"""Drive whole rounds of a mask protocol in-process, with clients that vanish before chosen steps,
and stop a round before one step so a test can feed that step one bad message."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from secagg import Client, RoundAborted, Server, make_round, session_id

LENGTH = 64


def random_inputs(ids, length=LENGTH, seed=0):
    rng = np.random.default_rng(seed)
    return {cid: rng.integers(0, 2**32, length, dtype=np.uint32) for cid in ids}


def plain_sum(inputs, ids, length):
    total = np.zeros(length, dtype=np.uint32)
    for cid in ids:
        total += inputs[cid]
    return total


@dataclass
class Round:
    """A server, its clients and the messages of a round in flight (for tests that tamper with one step)."""

    protocol: str
    ids: list
    length: int = LENGTH
    threshold: int | None = None
    degree: int | None = None
    run: str = "run"
    round: int = 0
    nonce: bytes | None = b"server nonce"
    bits: int | None = None  # the field width bound into the session
    refused: dict = field(default_factory=dict)  # client id -> the RoundAborted it raised

    def __post_init__(self):
        session = session_id(self.run, self.round, self.ids, protocol=self.protocol, length=self.length,
                             threshold=self.threshold, degree=self.degree, nonce=self.nonce, bits=self.bits)
        self.config = make_round(self.protocol, session, self.ids, self.length, self.threshold, self.degree)
        self.server = Server(self.config)
        self.clients = {cid: Client(self.config, cid) for cid in self.config.participants}

    def _call(self, cid, step, *args):
        """A client's step; a client that refuses (RoundAborted) leaves the round, as a dropout would."""
        try:
            return getattr(self.clients[cid], step)(*args)
        except RoundAborted as exc:
            self.refused[cid] = exc
            return None

    def advertise(self, drop=()):
        for cid in self.config.participants:
            if cid not in drop:
                self.server.receive_keys(self.clients[cid].advertise())
        self.roster = self.server.roster()
        return self.roster

    def share_keys(self, drop=()):
        self.share_msgs = {}
        for cid, *_ in self.roster.keys:
            if cid in drop:
                continue
            msg = self._call(cid, "share_keys", self.roster)
            if msg is not None:
                self.share_msgs[cid] = msg
                self.server.receive_shares(msg)
        self.bundles = self.server.bundles()
        return self.bundles

    def masked_input(self, inputs, drop=()):
        self.masked_msgs = {}
        for cid, bundle in self.bundles.items():
            if cid in drop:
                continue
            msg = self._call(cid, "masked_input", bundle, inputs[cid])
            if msg is not None:
                self.masked_msgs[cid] = msg
                self.server.add(msg)
        self.request = self.server.unmask_request()
        return self.request

    def unmask(self, drop=()):
        for cid in self.request.survivors:
            if cid in drop:
                continue
            msg = self._call(cid, "unmask", self.request)
            if msg is not None:
                self.server.receive_unmask(msg)
        return self.server.result()


def run_round(protocol, ids, inputs, drop_share=(), drop_masked=(), drop_unmask=(), drop_advertise=(), **kw):
    """One full round; returns (round, result). Raises RoundAborted when the round aborts."""
    r = Round(protocol, list(ids), length=len(next(iter(inputs.values()))), **kw)
    r.advertise(drop_advertise)
    r.share_keys(drop_share)
    r.masked_input(inputs, drop_masked)
    return r, r.unmask(drop_unmask)


# --- a `dh` round of five clients (t = 3) stopped before one step, for tests that feed it one bad message ---

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
