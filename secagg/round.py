"""One masked round's public parameters: session, cohort, vector length, threshold and neighbour graph.

Everything here is public and deterministic: every client and the server derive the same neighbour graph
from the session id alone, so the graph needs no message of its own.

Graph. `degree=None` is the full graph of Bonawitz et al. (CCS 2017): every client masks with and shares
its secrets among all others. A degree k gives SecAgg+ (Bell et al. 2020): a random k-regular graph, the
Harary graph H(k, n) (a ring where each client links to the k/2 nearest on each side) under a random
relabelling drawn from a PRG keyed by the session. Each client then masks with and shares among its k
neighbours only, and the threshold t counts shares within one neighbourhood of k + 1 (self included).

Threshold. Defaults to a strict majority of the group a secret is shared in: t = n // 2 + 1 for the full
graph, t = (k + 1) // 2 + 1 (= k // 2 + 1 for even k) with a graph. Bounds and why:
  * t <= group size, or no secret could ever be rebuilt;
  * t >= 2: with t = 1 a single share is the secret (any one other client could rebuild a client's
    self-mask seed and mask key and unmask its input), and a "sum" over one survivor is that client's input.
  * A majority is not required for the honest-but-curious promise, but below it a server that lies about
    who dropped could collect b-shares and key shares of the same client from two disjoint groups of t
    clients; the default keeps 2t > group size so that cannot happen (see docs/secagg.md).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .keys import client_id as _client_id
from .prg import prg_uint32
from .registry import get as _get_protocol
from .shamir import PRIME

SESSION_BYTES = 32
# Shamir's x-coordinate of client u is u + 1, which must be a nonzero element of the field.
MAX_CLIENT_ID = PRIME - 2
GRAPH_TAG = b"fedsqueeze/secaggplus-graph/"


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
        if isinstance(self.length, bool) or int(self.length) != self.length or self.length < 1:
            raise ValueError(f"length must be a positive integer, got {self.length!r}")
        object.__setattr__(self, "length", int(self.length))
        n = len(ids)
        if self.degree is not None:
            k = self.degree
            if isinstance(k, bool) or int(k) != k or not 2 <= k <= n - 1 or (k % 2 and k != n - 1):
                raise ValueError(f"degree must be an even integer in [2, {n - 1}] or n - 1 = {n - 1}, got {k!r}")
            object.__setattr__(self, "degree", int(k))
        t = self.threshold
        if isinstance(t, bool) or int(t) != t:
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

    def neighbours(self, client_id: int) -> tuple[int, ...]:
        """The clients `client_id` masks with and shares its secrets among (sorted; never itself)."""
        if self.full_graph:
            i = self._index(client_id)
            return self.participants[:i] + self.participants[i + 1:]
        return self._graph[self._index(client_id)]

    def _index(self, client_id: int) -> int:
        i = bisect.bisect_left(self.participants, client_id)
        if i == self.n or self.participants[i] != client_id:
            raise ValueError(f"client {client_id!r} is not a participant of this round")
        return i

    @cached_property
    def _graph(self) -> tuple[tuple[int, ...], ...]:
        """Neighbours of each participant (by index into participants) in the relabelled Harary graph."""
        n, half = self.n, self.degree // 2
        seed = hashlib.sha256(GRAPH_TAG + self.session).digest()
        keys = prg_uint32(seed, 2 * n).view(np.uint64)  # the public, session-keyed relabelling
        ring = np.lexsort((np.arange(n), keys))  # ring[j]: index of the participant at ring position j
        offsets = np.concatenate([np.arange(1, half + 1), -np.arange(1, half + 1)])
        position = np.empty(n, dtype=np.int64)
        position[ring] = np.arange(n)
        table = ring[(position[:, None] + offsets[None, :]) % n]  # (n, k) participant indices
        ids = np.asarray(self.participants, dtype=np.int64)
        return tuple(tuple(int(x) for x in np.sort(ids[row])) for row in table)


def default_degree(n: int) -> int:
    """SecAgg+ degree: the smallest even k >= 2 * ceil(log2 n), capped at n - 1 (then the graph is complete)."""
    k = 2 * math.ceil(math.log2(n)) if n > 1 else 0
    k += k % 2
    return min(max(k, 2), n - 1)


def make_round(protocol, session: bytes, participants, length: int, threshold: int | None = None,
               degree: int | None = None) -> RoundConfig:
    """A RoundConfig for `protocol` (registered name, alias or class) with the documented defaults.

    Full-graph protocols take no degree; SecAgg+ defaults to `default_degree(n)`. The threshold
    defaults to a strict majority of each secret's group (n // 2 + 1 for the full graph).
    """
    cls = _get_protocol(protocol) if isinstance(protocol, str) else protocol
    if not getattr(cls, "masks", False):
        raise ValueError(f"mask protocol {getattr(cls, 'name', cls)!r} does not mask: it has no rounds")
    ids = [_client_id(p) for p in participants]
    if len(set(ids)) != len(ids):
        raise ValueError("participants contain duplicate client ids")
    ids.sort()
    n = len(ids)
    if cls.full_graph:
        if degree is not None:
            raise ValueError(f"protocol {cls.name!r} uses the full graph; it takes no degree")
    elif degree is None and n >= 2:
        degree = default_degree(n)
    if threshold is None:
        group = n if degree is None else degree + 1
        threshold = group // 2 + 1
    return RoundConfig(session=session, participants=tuple(ids), length=length, threshold=threshold,
                       degree=degree)
