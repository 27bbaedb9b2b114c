"""The SecAgg+ split attack: survivors that fall into two parts with no graph edge between them let the server
read one part's exact sum. Helpers to find the ring of the public Harary graph, cut it into two arcs by
dropping two blocks of k/2 consecutive clients, and compute what the server can from what it holds."""

from __future__ import annotations

import numpy as np

from secagg import pairwise_seed, shamir
from secagg.keys import private_from_bytes
from secagg.prg import add_prg


def public_neighbours(r):
    """The neighbour function every party of round `r` computes (the server's copy of the graph)."""
    return r.server.graph.neighbours


def ring_from_graph(ids, neighbours):
    """The ring order of a Harary graph H(k, n) (n > 2k) from its edges alone: ring neighbours share the most
    neighbours (2h - 2 for ring distance 1, 2h - 1 - d for distance d <= h = k/2)."""
    nbrs = {u: set(neighbours(u)) for u in ids}

    def next_of(u, prev):
        close = sorted(nbrs[u], key=lambda v: -len(nbrs[u] & nbrs[v]))[:2]
        return close[0] if close[0] != prev else close[1]

    ring = [ids[0], next_of(ids[0], None)]
    while len(ring) < len(ids):
        ring.append(next_of(ring[-1], ring[-2]))
    assert len(set(ring)) == len(ids) and ring[0] in nbrs[ring[-1]], "not a Harary ring"
    return ring


def split_pattern(ring, degree, arc):
    """(clients to drop, the small arc): two blocks of k/2 consecutive ring clients dropped leave an arc of
    `arc` clients with no edge to the rest."""
    h = degree // 2
    dropped = ring[arc:arc + h] + ring[len(ring) - h:]
    return sorted(dropped), sorted(ring[:arc])


def _rebuild(server, owner, part):
    """owner's secret from the first t unmask responses holding a share of it (part 0: b, 2: mask key)."""
    xs, shares = [], []
    for v, response in sorted(server._responses.items()):
        ids, values = response[part], response[part + 1]
        hit = np.flatnonzero(ids == owner)
        if hit.size:
            xs.append(v + 1)
            shares.append(values[hit[0]])
    t = server.config.threshold
    return shamir.field_to_secret(shamir.reconstruct(xs[:t], np.stack(shares[:t])))


def part_sum_seen_by_server(r, part, neighbours):
    """sum_{u in part} y_u - PRG(b_u) - (u's masks with dropped clients), from the masked inputs, unmask
    responses and advertised keys the server holds: the part's exact sum when no edge leaves it to a survivor."""
    server, session = r.server, r.config.session
    dropped = set(r.request.dropped)
    total = np.zeros(r.config.length, dtype=np.uint32)
    for u in part:
        total += r.masked_msgs[u].masked
        add_prg(total, _rebuild(server, u, 0), subtract=True)
        for w in sorted(dropped & set(neighbours(u))):
            key = private_from_bytes(_rebuild(server, w, 2))
            seed = pairwise_seed(key, server._keys[u][1], session, w, u)
            add_prg(total, seed, subtract=w > u)  # u added +PRG(s_uw) for w > u, -PRG for w < u
    return total


def reference_components(neighbours, members) -> list[tuple[int, ...]]:
    """Connected components of the graph (`neighbours(u)`) restricted to `members`, each sorted, largest first:
    a plain reference search."""
    left, parts = set(members), []
    while left:
        stack, part = [left.pop()], set()
        while stack:
            u = stack.pop()
            part.add(u)
            nxt = (set(neighbours(u)) & left) - part
            left -= nxt
            stack += nxt
        parts.append(tuple(sorted(part)))
    return sorted(parts, key=lambda p: (-len(p), p))
