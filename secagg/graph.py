"""The public neighbour graph of a round, over the clients of its key roster, and its connectivity.

Complete for `dh` (and for SecAgg+ when k >= |roster| - 1). For SecAgg+ it is the Harary graph H(k, m)
over the m roster clients (a ring, each client joined to the k/2 nearest on each side; vertex
connectivity k) under a random relabelling keyed by SHA-256(tag, every roster entry in order).
The advertised keys are fresh, so nobody (the server included) knows the graph before the keys are in;
every client derives the same graph from the roster it receives, with no extra message.

Why connectivity matters: pairwise masks between two survivors cancel only in a sum over both. If the
survivors fall into parts with no edge between them, the server can remove self-masks and dropped
clients' masks of one part alone and read that part's sum; a round whose survivors are not connected
must abort before any share is released (`components`).
"""

from __future__ import annotations

import bisect
import hashlib
import numbers
import struct
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from .prg import prg_uint32

GRAPH_TAG = b"fedsqueeze/secaggplus-graph/v2/"


def graph_seed(entries: Iterable[tuple[int, bytes, bytes]]) -> bytes:
    """SHA-256 over every (id, c_pk, s_pk) of the roster, in roster order (keys are 32 bytes). The keys are
    fresh each round, so the graph is unknown before they are in; the session is left out so that a
    simulation whose keys are seeded draws the same graph in every rerun, whatever its run's nonce."""
    h = hashlib.sha256(GRAPH_TAG)
    for cid, c_pk, s_pk in entries:
        h.update(struct.pack(">Q", cid) + c_pk + s_pk)
    return h.digest()


@lru_cache(maxsize=8)
def build_graph(nodes: tuple[int, ...], degree: int | None, seed: bytes) -> Graph:
    """One Graph per (roster, degree, seed), shared by the clients a process hosts and its server."""
    return Graph(nodes, degree, seed)


class Graph:
    """Neighbours of each roster client; `ring` is the ring order (the sorted ids for a complete graph)."""

    def __init__(self, nodes: Sequence[int], degree: int | None, seed: bytes) -> None:
        self.nodes = tuple(sorted(nodes))
        if any(b == a for a, b in zip(self.nodes, self.nodes[1:])):
            raise ValueError("graph nodes must be distinct client ids")
        self._last: tuple[tuple[int, ...], list[tuple[int, ...]]] | None = None
        m = len(self.nodes)
        self.complete = degree is None or degree >= m - 1
        if self.complete:
            self.ring = self.nodes
            self._table = None
            return
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 2 or degree % 2:
            raise ValueError(f"a sparse graph's degree must be an even integer >= 2, got {degree!r}")
        half = degree // 2
        words = prg_uint32(seed, 2 * m).astype(np.uint64)
        keys = words[0::2] | (words[1::2] << np.uint64(32))  # spelled out, not .view: the same on any byte order
        ring = np.lexsort((np.arange(m), keys))  # ring[j]: index of the client at ring position j
        self.ring = tuple(self.nodes[i] for i in ring)
        offsets = np.concatenate([np.arange(1, half + 1), -np.arange(1, half + 1)])
        position = np.empty(m, dtype=np.int64)
        position[ring] = np.arange(m)
        table = ring[(position[:, None] + offsets[None, :]) % m]  # (m, k) node indices
        ids = np.asarray(self.nodes, dtype=np.int64)
        self._table = tuple(tuple(int(x) for x in np.sort(ids[row])) for row in table)

    def neighbours(self, client_id: int) -> tuple[int, ...]:
        """The clients `client_id` masks with and shares its secrets among (sorted; never itself)."""
        i = bisect.bisect_left(self.nodes, client_id)
        if i == len(self.nodes) or self.nodes[i] != client_id:
            raise ValueError(f"client {client_id!r} is not in this round's key roster")
        if self._table is None:
            return self.nodes[:i] + self.nodes[i + 1:]
        return self._table[i]

    def components(self, members: Iterable[int]) -> list[tuple[int, ...]]:
        """The connected components of the graph restricted to `members` (each sorted), largest first."""
        key = tuple(sorted(set(members)))
        if self._last is None or self._last[0] != key:  # every client of a process asks about one request
            self._last = key, self._components(key)
        return list(self._last[1])

    def _components(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        left = set(members)
        if self.complete:
            return [members] if members else []
        parts = []
        while left:
            start = min(left)
            left.discard(start)
            stack, part = [start], [start]
            while stack:
                for v in self.neighbours(stack.pop()):
                    if v in left:
                        left.discard(v)
                        stack.append(v)
                        part.append(v)
            parts.append(tuple(sorted(part)))
        return sorted(parts, key=lambda p: (-len(p), p))
