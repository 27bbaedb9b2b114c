"""RoundConfig and make_round: the defaults, the bounds, and the public neighbour graph."""

import math
import os

import pytest

import secagg
from secagg import KeyRoster, RoundConfig, default_degree, make_round, session_id


def config(protocol, n, **kw):
    ids = list(range(n))
    return make_round(protocol, session_id("run", 0, ids), ids, 100, **kw)


def roster(cfg, ids=None, keys=None):
    """A key roster of `ids` (default: every participant) with random stand-in keys."""
    ids = cfg.participants if ids is None else ids
    keys = keys or {cid: (os.urandom(32), os.urandom(32)) for cid in ids}
    return KeyRoster(cfg.session, tuple((cid, *keys[cid]) for cid in sorted(ids)))


@pytest.mark.parametrize("n", [2, 3, 10, 30, 100, 1000])
def test_the_full_graph_defaults_to_a_majority_threshold(n):
    cfg = config("dh", n)
    assert cfg.threshold == n // 2 + 1 and cfg.degree is None and cfg.full_graph
    assert cfg.graph(roster(cfg)).neighbours(0) == tuple(range(1, n))


@pytest.mark.parametrize("n,degree,threshold", [(3, 2, 2), (10, 8, 5), (30, 10, 6), (100, 14, 8), (1000, 20, 11)])
def test_secaggplus_defaults_to_a_logarithmic_even_degree_and_a_majority_of_each_neighbourhood(n, degree, threshold):
    cfg = config("secaggplus", n)
    assert cfg.degree == degree == default_degree(n)
    assert degree % 2 == 0 and degree >= 2 * math.ceil(math.log2(n)) or degree == n - 1
    assert cfg.threshold == threshold == degree // 2 + 1
    assert cfg.group_size == degree + 1


def test_the_default_degree_is_capped_at_n_minus_1():
    assert default_degree(4) == 3 and default_degree(2) == 1
    for n in (1, 0, -3, 2.5):  # no round has them: not a degree of 0 or -1
        with pytest.raises(ValueError, match="n >= 2"):
            default_degree(n)
    cfg = config("secaggplus", 4)
    assert cfg.degree == 3 and cfg.full_graph and cfg.threshold == 3  # a majority of 4


@pytest.mark.parametrize("n", [10, 30, 101])
def test_the_neighbour_graph_is_regular_symmetric_and_excludes_self(n):
    cfg = config("secaggplus", n)
    graph = cfg.graph(roster(cfg))
    for u in cfg.participants:
        nbrs = graph.neighbours(u)
        assert len(nbrs) == cfg.degree == len(set(nbrs))
        assert u not in nbrs and list(nbrs) == sorted(nbrs)
        assert all(u in graph.neighbours(v) for v in nbrs)


def test_the_graph_is_a_public_function_of_the_roster_alone():
    """Drawn from the advertised keys (fresh each round): the same keys give the same graph in any session, so
    a simulation that seeds its keys repeats its graph in a rerun; other keys give another graph."""
    ids = list(range(40))
    a = make_round("secaggplus", session_id("run", 0, ids), ids, 10)
    b = make_round("secaggplus", session_id("run", 0, ids), ids, 999)
    c = make_round("secaggplus", session_id("run", 1, ids), ids, 10)
    keys = {cid: (os.urandom(32), os.urandom(32)) for cid in ids}
    other = {**keys, 7: (os.urandom(32), keys[7][1])}

    def graph(cfg, keys=keys):
        g = cfg.graph(roster(cfg, keys=keys))
        return [g.neighbours(u) for u in ids]

    assert graph(a) == graph(b) == graph(c)
    assert graph(a) != graph(a, other)
    assert graph(a) != [tuple(sorted({(u + d) % 40 for d in (-5, -4, -3, -2, -1, 1, 2, 3, 4, 5)})) for u in ids]


def test_the_secaggplus_graph_spans_the_roster_and_is_complete_when_it_is_small():
    cfg = config("secaggplus", 30)
    present = [u for u in cfg.participants if u % 3]  # 20 of 30 advertised
    graph = cfg.graph(roster(cfg, present))
    assert graph.nodes == tuple(present) and not graph.complete
    assert all(len(graph.neighbours(u)) == 10 and set(graph.neighbours(u)) <= set(present) for u in present)
    few = cfg.graph(roster(cfg, present[:9]))  # 9 clients: k = 10 > 8, so every pair is joined
    assert few.complete and few.neighbours(present[0]) == tuple(present[1:9])
    with pytest.raises(ValueError, match="not in this round's key roster"):
        graph.neighbours(0)
    with pytest.raises(ValueError, match="not a participant"):
        cfg.graph(roster(cfg, [*present, 99]))


def test_ids_need_not_be_contiguous_and_are_sorted():
    cfg = make_round("dh", session_id("run", 0, [42, 7, 3]), [42, 7, 3], 10)
    assert cfg.participants == (3, 7, 42)
    assert cfg.graph(roster(cfg)).neighbours(7) == (3, 42)
    with pytest.raises(ValueError, match="not a participant"):
        cfg.check_participant(8)
    with pytest.raises(ValueError, match="not a participant"):
        secagg.Client(cfg, 8)


@pytest.mark.parametrize("kw,match", [
    ({"threshold": 11}, "exceeds"),
    ({"threshold": 1}, "< 2"),
    ({"threshold": 0}, "< 2"),
    ({"threshold": 2.5}, "integer"),
])
def test_thresholds_outside_2_to_n_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        config("dh", 10, **kw)


def test_a_secaggplus_threshold_above_the_neighbourhood_is_refused():
    with pytest.raises(ValueError, match="exceeds the 11 shares"):
        config("secaggplus", 30, degree=10, threshold=12)
    assert config("secaggplus", 30, degree=10, threshold=11).threshold == 11


@pytest.mark.parametrize("degree", [1, 3, 30, 0, "4", 4.5])
def test_a_degree_that_is_odd_or_out_of_range_is_refused(degree):
    with pytest.raises(ValueError, match="degree"):
        config("secaggplus", 30, degree=degree)


def test_secaggplus_with_two_clients_is_the_full_graph_of_degree_one():
    """n - 1 is always a valid degree (the full graph), even where it is 1 and so below the even range."""
    cfg = config("secaggplus", 2)
    assert cfg.degree == 1 and cfg.full_graph and cfg.threshold == 2
    assert cfg.graph(roster(cfg)).neighbours(0) == (1,)
    with pytest.raises(ValueError, match="degree"):
        config("secaggplus", 3, degree=1)


def test_the_full_graph_takes_no_degree():
    with pytest.raises(ValueError, match="takes no degree"):
        config("dh", 10, degree=4)


def test_bad_cohorts_are_refused():
    session = session_id("run", 0, [0, 1])
    with pytest.raises(ValueError, match="duplicate"):
        make_round("dh", session, [0, 0, 1], 10)
    with pytest.raises(ValueError, match="duplicate"):  # refused as make_round refuses it, not deduplicated
        session_id("run", 0, [0, 0, 1])
    with pytest.raises(ValueError, match="at least 2"):
        make_round("dh", session, [0], 10, threshold=2)
    with pytest.raises(ValueError, match="lie in"):
        make_round("dh", session, [0, secagg.MAX_CLIENT_ID + 1], 10)
    with pytest.raises(ValueError, match="sorted"):
        RoundConfig(session, (1, 0), 10, 2)
    with pytest.raises(ValueError, match="threshold must be an integer"):  # RoundConfig has no default t
        RoundConfig(session, (0, 1), 10, None)
    with pytest.raises(ValueError, match="length must be"):
        RoundConfig(session, (0, 1), None, 2)
    with pytest.raises(ValueError, match="32 bytes"):
        make_round("dh", b"short", [0, 1], 10)
    with pytest.raises(ValueError, match="length"):
        make_round("dh", session, [0, 1], 0)
    with pytest.raises(ValueError, match="does not mask"):
        make_round("none", session, [0, 1], 10)
    with pytest.raises(secagg.UnknownProtocolError):
        make_round("nope", session, [0, 1], 10)


@pytest.mark.parametrize("field", ["length", "threshold", "degree"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_an_infinite_or_nan_length_threshold_or_degree_is_refused_as_a_value_error(field, value):
    """A ValueError naming the field, as for any other number that is not an integer (int() of inf overflows)."""
    kw = {"length": 100, "threshold": 6, "degree": 10, field: value}
    with pytest.raises(ValueError, match=field):
        RoundConfig(session_id("run", 0, range(30)), tuple(range(30)), **kw)


def test_a_session_binds_the_configuration_as_make_round_holds_it():
    """Integral floats and numpy integers are taken by make_round as the integers they are: the session binds
    those integers, rather than failing to pack a float."""
    import numpy as np

    ids = list(range(30))
    want = session_id("run", 0, ids, protocol="secaggplus", length=100, threshold=6, degree=10)
    assert session_id("run", 0, ids, protocol="secaggplus", length=100.0, threshold=6.0, degree=10.0) == want
    assert session_id("run", 0, ids, protocol="secaggplus", length=np.int64(100), degree=np.int32(10),
                      threshold=np.int16(6)) == want
    assert session_id("run", 0, ids, protocol="secaggplus", length=100, degree=10.0) == \
        session_id("run", 0, ids, protocol="secaggplus", length=100, degree=10)  # the default t from a float k


def test_make_round_accepts_the_protocol_class_or_an_alias():
    ids = [0, 1, 2]
    session = session_id("run", 0, ids)
    assert make_round(secagg.SecAggProtocol, session, ids, 5) == make_round("DHProtocol", session, ids, 5)
    assert make_round("SecAggPlusProtocol", session, ids, 5).degree == 2


def test_without_a_roster_only_the_full_graph_is_known():
    assert config("dh", 4).neighbours(2) == (0, 1, 3)
    with pytest.raises(ValueError, match="drawn from the key roster"):
        config("secaggplus", 30).neighbours(0)
