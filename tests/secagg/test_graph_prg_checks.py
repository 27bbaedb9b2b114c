"""What the mask PRG, the neighbour graph and the message checks promise beyond what the round tests reach:
add_prg's own refusals, the graph's derivation from the roster (against a plain re-derivation), its component
search asked about one set after another, and a malformed id list refused as a protocol error."""

import hashlib
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from secagg_rounds import at_unmask
from split_graph import reference_components

from secagg import Graph, KeyRoster, ProtocolError, UnmaskRequest, make_round, prg_uint32, session_id
from secagg.prg import add_prg

SEED = bytes(range(32))
IDS = list(range(3, 63, 2))  # 30 clients, ids neither contiguous nor starting at 0


# --- add_prg ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [16, 24, 31, 33])
def test_add_prg_refuses_a_seed_that_is_not_32_bytes(size):
    """AES also takes 16- and 24-byte keys: without the check a short seed would mask with a weaker cipher."""
    acc = np.zeros(10, np.uint32)
    with pytest.raises(ValueError, match="32 bytes"):
        add_prg(acc, bytes(size))
    assert not acc.any()


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32, np.float64])
def test_add_prg_refuses_an_accumulator_that_is_not_uint32(dtype):
    """Masks cancel only mod 2^32: an int64 sum would keep every mask's carry."""
    acc = np.zeros(10, dtype)
    with pytest.raises(ValueError, match="uint32 accumulator"):
        add_prg(acc, SEED)
    assert not acc.any()


@pytest.mark.parametrize("scratch", [np.empty(100, np.float32), np.empty(100, np.int64), np.empty(3, np.uint32)])
def test_a_scratch_buffer_that_cannot_serve_is_replaced_and_the_stream_is_the_same(scratch):
    acc = np.zeros(50, np.uint32)
    add_prg(acc, SEED, scratch=scratch)
    np.testing.assert_array_equal(acc, prg_uint32(SEED, 50))


# --- the neighbour graph ------------------------------------------------------------------------


def roster_of(config, ids):
    keys = {cid: (hashlib.sha256(b"c%d" % cid).digest(), hashlib.sha256(b"s%d" % cid).digest()) for cid in ids}
    return KeyRoster(config.session, tuple((cid, *keys[cid]) for cid in sorted(ids)))


def reference_graph(roster, degree):
    """The module's recipe, spelled out: SHA-256 over the tag and every (8-byte big-endian id, c_pk, s_pk) in
    roster order; 2m keystream words of AES-256-CTR (zero counter, little-endian); client i's ring key is word 2i
    plus word 2i+1 times 2^32; the ring is the clients by (key, index); each is joined to k/2 on each side."""
    entries = roster.keys
    m, h = len(entries), degree // 2
    seed = hashlib.sha256(b"fedsqueeze/secaggplus-graph/v2/" +
                          b"".join(struct.pack(">Q", cid) + c_pk + s_pk for cid, c_pk, s_pk in entries)).digest()
    stream = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(8 * m))
    words = struct.unpack(f"<{2 * m}I", stream)
    keys = [words[2 * i] | words[2 * i + 1] << 32 for i in range(m)]
    ids = sorted(cid for cid, _, _ in entries)
    ring = sorted(range(m), key=lambda i: (keys[i], i))
    where = {node: j for j, node in enumerate(ring)}
    neighbours = {ids[i]: tuple(sorted(ids[ring[(where[i] + d) % m]] for d in [*range(1, h + 1), *range(-h, 0)]))
                  for i in range(m)}
    return tuple(ids[i] for i in ring), neighbours


@pytest.mark.parametrize("degree", [4, 10])
def test_the_graph_is_the_documented_function_of_the_roster(degree):
    """Both halves of a round (and a rerun of a seeded simulation) must derive exactly this graph."""
    config = make_round("secaggplus", session_id("run", 0, IDS), IDS, 10, degree=degree)
    roster = roster_of(config, IDS)
    graph = config.graph(roster)
    ring, neighbours = reference_graph(roster, degree)
    assert graph.ring == ring
    assert {u: graph.neighbours(u) for u in IDS} == neighbours


def test_the_same_keys_under_other_ids_give_another_graph():
    config = make_round("secaggplus", session_id("run", 0, IDS), IDS, 10, degree=4)
    roster = roster_of(config, IDS)
    shifted = KeyRoster(config.session, tuple((cid + 1, c_pk, s_pk) for cid, c_pk, s_pk in roster.keys))
    other = make_round("secaggplus", session_id("run", 0, IDS), [cid + 1 for cid in IDS], 10, degree=4)
    assert reference_graph(shifted, 4)[1] == {u: other.graph(shifted).neighbours(u) for u in other.participants}
    assert other.graph(shifted).ring != tuple(cid + 1 for cid in config.graph(roster).ring)


def test_a_client_above_every_roster_id_is_refused_with_a_clear_error():
    for protocol in ("dh", "secaggplus"):
        config = make_round(protocol, session_id("run", 0, IDS), IDS, 10)
        graph = config.graph(roster_of(config, IDS))
        for stranger in (0, 4, IDS[-1] + 1, 10**6):
            with pytest.raises(ValueError, match="not in this round's key roster"):
                graph.neighbours(stranger)


@pytest.mark.parametrize("nodes,degree", [(range(10), 3), (range(10), 0), (range(10), -2), (range(10), 4.0),
                                          ([0, 0, 1, 2, 3, 4, 5], 2), ([0, 0, 1], None)])
def test_a_graph_built_by_hand_with_an_odd_or_non_integer_degree_or_a_repeated_node_is_refused(nodes, degree):
    """Not a ring of another degree, an empty neighbourhood or one client twice: RoundConfig never builds
    these, a caller building a Graph itself must not get them silently."""
    with pytest.raises(ValueError, match="degree must be an even integer|distinct"):
        Graph(nodes, degree, SEED)


def test_components_answer_each_set_of_members_asked_about_in_turn():
    """One Graph serves a process's clients and its server (and both masked exchanges of a round): asked about
    a connected set, then a split one, it must not answer from the first."""
    config = make_round("secaggplus", session_id("run", 0, IDS), IDS, 10, degree=4)
    graph = config.graph(roster_of(config, IDS))
    ring = list(graph.ring)
    split = sorted(set(IDS) - {*ring[5:7], *ring[20:22]})  # two cuts of k/2 ring neighbours: two arcs
    connected = sorted(set(IDS) - set(ring[5:7]))
    for members in (IDS, split, connected, split, IDS):
        assert graph.components(members) == reference_components(graph.neighbours, members)
    assert len(graph.components(split)) == 2 and len(graph.components(connected)) == 1


# --- message checks -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["survivors", "dropped"])
def test_an_unmask_request_whose_id_list_is_not_a_list_is_a_protocol_error(field):
    """A ProtocolError is what a round refuses a bad message with; a TypeError would crash the caller instead."""
    r = at_unmask()
    lists = {"survivors": tuple(r.config.participants), "dropped": (), field: None}
    with pytest.raises(ProtocolError, match="malformed entry"):
        r.clients[r.config.participants[0]].unmask(UnmaskRequest(session=r.config.session, **lists))
