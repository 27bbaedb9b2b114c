"""One masked round's public parameters: session, cohort, vector length, threshold and degree; the session id.

Session. `session_id` hashes run, round and cohort, and (keyword-only) the round's whole configuration
(protocol, t, k, vector length), a server nonce and the field's width; it salts every key derivation and is
carried by every message, so a message from another round, cohort, configuration, field or run (another
nonce) is refused.

Graph. `degree=None` is the full graph of Bonawitz et al. (CCS 2017): every client masks with and shares
its secrets among all others. A degree k gives SecAgg+ (Bell et al. 2020): a relabelled Harary graph
drawn, once the keys are in, from the key roster (not the session: see docs/secagg.md, Graph) (`RoundConfig.graph`,
secagg/graph.py).
Each client then masks with and shares among its k neighbours only, and the threshold t counts shares
within one neighbourhood of k + 1 (self included).

Threshold. Defaults to a strict majority of the group a secret is shared in: t = n // 2 + 1 for the full
graph, t = (k + 1) // 2 + 1 (= k // 2 + 1 for even k) with a graph. Bounds and why:
  * t <= group size, or no secret could ever be rebuilt;
  * t >= 2: with t = 1 a single share is the secret (any one other client could rebuild a client's
    self-mask seed and mask key and unmask its input), and a "sum" over one survivor is that client's input.
  * A majority is not required for the honest-but-curious promise, but below it a server that lies about
    who dropped could collect b-shares and key shares of the same client from two disjoint groups of t
    clients; the default keeps 2t > group size so that cannot happen without colluders. It can with them:
    c colluding holders hold shares of both secrets, so t - c honest answers of each kind suffice (an
    equivocating server is not covered; see docs/secagg.md, Threshold).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import numbers
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from .graph import Graph, build_graph, graph_seed
from .keys import client_id as _client_id
from .messages import KeyRoster
from .quantize import MAX_FIELD_BITS
from .registry import get as _get_protocol
from .shamir import PRIME

SESSION_BYTES = 32
# Shamir's x-coordinate of client u is u + 1, which must be a nonzero element of the field.
MAX_CLIENT_ID = PRIME - 2
SESSION_TAG = b"fedsqueeze-secagg-v1"


@dataclass(frozen=True)
class RoundConfig:
    """The public parameters of one masked round (validated on construction; ValueError otherwise)."""

    session: bytes
    participants: tuple[int, ...]  # the cohort, sorted, unique
    length: int  # masked vector length
    threshold: int  # t: shares needed to rebuild one secret
    degree: int | None = None  # None: full graph; k: SecAgg+ k-regular graph

    def __post_init__(self) -> None:
        if not isinstance(self.session, bytes) or len(self.session) != SESSION_BYTES:
            raise ValueError(f"session must be {SESSION_BYTES} bytes (see secagg.session_id)")
        ids = tuple(_client_id(p) for p in self.participants)
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise ValueError("participants must be sorted and unique (make_round sorts them)")
        if ids and ids[-1] > MAX_CLIENT_ID:
            raise ValueError(f"client ids must lie in [0, {MAX_CLIENT_ID}] (Shamir x = id + 1 < 2^31 - 1)")
        if len(ids) < 2:
            raise ValueError(f"secure aggregation needs at least 2 participants, got {len(ids)}")
        object.__setattr__(self, "participants", ids)
        if not _integral(self.length) or self.length < 1:
            raise ValueError(f"length must be a positive integer, got {self.length!r}")
        object.__setattr__(self, "length", int(self.length))
        n = len(ids)
        if self.degree is not None:
            k = self.degree
            if not _integral(k) or (k != n - 1 and (not 2 <= k < n - 1 or k % 2)):
                raise ValueError(f"degree must be an even integer in [2, {n - 1}] or n - 1 = {n - 1}, got {k!r}")
            object.__setattr__(self, "degree", int(k))
        t = self.threshold
        if not _integral(t):
            raise ValueError(f"threshold must be an integer, got {t!r}")
        if t < 2:
            raise ValueError(f"threshold t={t} < 2: one share would reveal a secret (see secagg/round.py)")
        if t > self.group_size:
            raise ValueError(f"threshold t={t} exceeds the {self.group_size} shares of each secret")
        object.__setattr__(self, "threshold", int(t))

    @property
    def n(self) -> int:
        return len(self.participants)

    @property
    def full_graph(self) -> bool:
        return self.degree is None or self.degree == self.n - 1

    @property
    def group_size(self) -> int:
        """How many clients hold a share of each secret: the owner and its neighbours."""
        return self.n if self.degree is None else self.degree + 1

    def check_participant(self, client_id: int) -> None:
        i = bisect.bisect_left(self.participants, client_id)
        if i == self.n or self.participants[i] != client_id:
            raise ValueError(f"client {client_id!r} is not a participant of this round")

    def neighbours(self, client_id: int) -> tuple[int, ...]:
        """Full graph only: every other participant. A SecAgg+ graph exists only once the keys are in."""
        self.check_participant(client_id)
        if not self.full_graph:
            raise ValueError("the SecAgg+ graph is drawn from the key roster: use config.graph(roster).neighbours "
                             "(or Client.graph / Server.graph once the roster is out)")
        i = self.participants.index(client_id)
        return self.participants[:i] + self.participants[i + 1:]

    def graph(self, roster: KeyRoster) -> Graph:
        """The neighbour graph over the roster's clients, keyed by every advertised key (not the session)."""
        for cid, *_ in roster.keys:
            self.check_participant(cid)
        nodes = tuple(sorted(cid for cid, *_ in roster.keys))
        return build_graph(nodes, self.degree, graph_seed(roster.keys))


def _integral(value: object) -> bool:
    """An int, numpy integer or integral float; never a bool, None or a string (False, not a crash)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            and int(value) == value)


def default_degree(n: int) -> int:
    """SecAgg+ degree: the smallest even k >= 2 * ceil(log2 n), capped at n - 1 (then the graph is complete)."""
    if not _integral(n) or n < 2:  # no round has fewer clients (RoundConfig refuses it)
        raise ValueError(f"the degree needs an integer n >= 2 clients, got {n!r}")
    k = 2 * math.ceil(math.log2(n))
    k += k % 2
    return min(max(k, 2), n - 1)


def _resolve(protocol, n: int, threshold: int | None, degree: int | None):
    """(protocol class, threshold, degree) with make_round's defaults filled in."""
    cls = _get_protocol(protocol) if isinstance(protocol, str) else protocol
    if not getattr(cls, "masks", False):
        raise ValueError(f"mask protocol {getattr(cls, 'name', cls)!r} does not mask: it has no rounds")
    if cls.full_graph:
        if degree is not None:
            raise ValueError(f"protocol {cls.name!r} uses the full graph; it takes no degree")
    elif degree is None and n >= 2:
        degree = default_degree(n)
    if threshold is None and (degree is None or _integral(degree)):  # else RoundConfig refuses the degree
        group = n if degree is None else degree + 1
        threshold = group // 2 + 1
    return cls, threshold, degree


def make_round(protocol, session: bytes, participants, length: int, threshold: int | None = None,
               degree: int | None = None) -> RoundConfig:
    """A RoundConfig for `protocol` (registered name, alias or class) with the documented defaults.

    Full-graph protocols take no degree; SecAgg+ defaults to `default_degree(n)`. The threshold
    defaults to a strict majority of each secret's group (n // 2 + 1 for the full graph).
    """
    ids = [_client_id(p) for p in participants]
    if len(set(ids)) != len(ids):
        raise ValueError("participants contain duplicate client ids")
    ids.sort()
    _, threshold, degree = _resolve(protocol, len(ids), threshold, degree)
    return RoundConfig(session=session, participants=tuple(ids), length=length, threshold=threshold,
                       degree=degree)


def session_id(run_id: str, round: int, participants: Iterable[int], *, protocol=None, length: int | None = None,
               threshold: int | None = None, degree: int | None = None, nonce: bytes | None = None,
               bits: int | None = None) -> bytes:
    """SHA-256 over a length-prefixed encoding of (tag, run id, round, sorted participant ids), then,
    when given, the configuration (protocol name, t, k, length; t and k as make_round resolves them, so pass
    the same arguments; a configuration make_round would refuse is refused), the server's nonce and the field's
    width in bits. Each keyword input left out adds nothing to the hash (with none, only the tag, run id, round
    and ids are hashed); ValueError for length, t or k without the protocol."""
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a str, got {type(run_id).__name__}")
    if isinstance(round, bool) or not isinstance(round, numbers.Integral) or not 0 <= round < 2**64:
        raise ValueError(f"round must be an integer in [0, 2^64), got {round!r}")
    run = run_id.encode("utf-8")
    ids = sorted(_client_id(p) for p in participants)
    if any(a == b for a, b in zip(ids, ids[1:])):
        raise ValueError("participants contain duplicate client ids")  # as make_round refuses them
    encoded = [SESSION_TAG, struct.pack(">I", len(run)), run, struct.pack(">QI", round, len(ids))]
    encoded += [struct.pack(">Q", cid) for cid in ids]
    if protocol is not None:
        if length is None:
            raise ValueError("binding the configuration needs the vector length, got None")
        cls, t, k = _resolve(protocol, len(ids), threshold, degree)
        cfg = RoundConfig(bytes(SESSION_BYTES), tuple(ids), length, t, k)  # refuses what make_round refuses
        name = cls.name.encode("utf-8")
        encoded += [b"config", struct.pack(">I", len(name)), name,
                    struct.pack(">QQQ", cfg.threshold, cfg.degree or 0, cfg.length)]
    elif (length, threshold, degree) != (None, None, None):
        raise ValueError("binding length, threshold or degree into the session needs the protocol too")
    if nonce is not None:
        if not isinstance(nonce, bytes):
            raise TypeError(f"the session nonce must be bytes, got {type(nonce).__name__}")
        encoded += [b"nonce", struct.pack(">I", len(nonce)), nonce]
    if bits is not None:
        if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not 2 <= bits <= MAX_FIELD_BITS:
            raise ValueError(f"the field width must be an integer in [2, {MAX_FIELD_BITS}] bits (as "
                             f"FixedPointQuantizer's), got {bits!r}")
        encoded += [b"field", struct.pack(">I", int(bits))]
    return hashlib.sha256(b"".join(encoded)).digest()
