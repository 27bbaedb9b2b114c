"""Shared index policies under masking: randk, prev_topk, sketch (and its randk fallback), all from public seeds."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compression.index_policy import IndexPolicy, public_seed, random_positions, sketch_shape
from compression.sketch import CountSketch

ROOT = 1234


def assert_index_set(positions, length, k):
    """k distinct positions of [0, length), strictly increasing, int64."""
    assert positions.dtype == np.int64 and positions.shape == (k,)
    assert np.all(np.diff(positions) > 0) and positions[0] >= 0 and positions[-1] < length


# --- randk ------------------------------------------------------------------------------------------


def test_randk_gives_k_distinct_sorted_positions_a_client_derives_from_the_public_seed():
    policy = IndexPolicy("randk", 500, 37, ROOT)
    for r in range(4):
        positions, seed = policy.positions(r)
        assert_index_set(positions, 500, 37)
        assert seed != 0 and seed == public_seed(ROOT, r, 1)
        np.testing.assert_array_equal(random_positions(500, 37, seed), positions)  # the seed alone suffices
        assert policy.sketch(r) is None
    assert policy.name == "randk"


def test_randk_is_the_same_on_every_call_of_a_round_and_differs_across_rounds_and_roots():
    policy, twin = IndexPolicy("randk", 500, 37, ROOT), IndexPolicy("randk", 500, 37, ROOT)
    rounds = [policy.positions(r)[0] for r in range(5)]
    for r, positions in enumerate(rounds):
        np.testing.assert_array_equal(policy.positions(r)[0], positions)
        np.testing.assert_array_equal(twin.positions(r)[0], positions)
    assert len({tuple(p) for p in rounds}) == 5
    assert not np.array_equal(IndexPolicy("randk", 500, 37, ROOT + 1).positions(0)[0], rounds[0])


def test_randk_ignores_what_the_server_observes():
    policy = IndexPolicy("randk", 500, 37, ROOT)
    positions, _ = policy.positions(0)
    policy.observe(0, positions, np.arange(37, dtype=np.float32), None)
    after, seed = policy.positions(1)
    np.testing.assert_array_equal(after, random_positions(500, 37, public_seed(ROOT, 1, 1)))
    assert seed == public_seed(ROOT, 1, 1)


# --- prev_topk --------------------------------------------------------------------------------------


def largest_magnitudes(positions, aggregate, count):
    """The positions of the `count` entries of `aggregate` (values at `positions`) largest in magnitude."""
    order = np.argsort(-np.abs(aggregate), kind="stable")
    return set(positions[order[:count]].tolist())


@pytest.mark.parametrize("k, share, n_random", [(20, 0.25, 5), (20, 0.1, 2), (10, 0.25, 3), (5, 0.1, 1),
                                                 (20, 0.0, 1), (20, 1.0, 20), (1, 0.1, 1)])
def test_prev_topk_keeps_the_top_of_the_previous_aggregate_plus_a_public_random_share(k, share, n_random):
    """n_random = min(k, max(1, share * k rounded half up)); the other k - n_random are the previous round's
    largest-magnitude values, at their positions."""
    length = 300
    policy = IndexPolicy("prev_topk", length, k, ROOT, random_share=share)
    positions, seed = policy.positions(0)
    assert seed == public_seed(ROOT, 0, 1) and policy.sketch(0) is None  # round 0: the public random set
    np.testing.assert_array_equal(positions, random_positions(length, k, seed))
    rng = np.random.default_rng(k)
    aggregate = (rng.permutation(k) + 1.0) * rng.choice([-1.0, 1.0], k)  # distinct magnitudes, both signs
    policy.observe(0, positions, aggregate, None)
    following, seed = policy.positions(1)
    assert seed == 0  # depends on the aggregate: the server sends the positions
    assert_index_set(following, length, k)
    kept = largest_magnitudes(positions, aggregate, k - n_random)
    assert kept <= set(following.tolist())
    assert len(set(following.tolist()) - kept) == n_random
    np.testing.assert_array_equal(policy.positions(1)[0], following)


@pytest.mark.parametrize("k, share, n_random", [(10, 0.25, 3), (14, 0.25, 4), (6, 0.25, 2), (25, 0.58, 15)])
def test_prev_topk_keeps_k_minus_n_random_of_the_previous_set_with_the_share_rounded_half_up(k, share, n_random):
    """share * k = 2.5, 3.5, 1.5 rounds up (not to even, not down), and 0.58 * 25 = 14.5 too, as the decimals read
    (14.499999999999998 in binary): exactly k - n_random of the previous set stay (counting kept positions alone
    cannot tell, since the top k - n_random of a larger top are among it too)."""
    length = 100_000
    policy = IndexPolicy("prev_topk", length, k, ROOT, random_share=share)
    positions, _ = policy.positions(0)
    policy.observe(0, positions, np.arange(k, 0, -1, dtype=np.float64), None)
    following, _ = policy.positions(1)
    assert len(set(following.tolist()) & set(positions.tolist())) == k - n_random  # these draws miss the old set


def test_prev_topk_draws_its_random_share_outside_the_kept_positions():
    """Half of 10 positions of 12 are drawn at random: from the 7 not kept, so the set stays k distinct positions."""
    length, k = 12, 10
    policy = IndexPolicy("prev_topk", length, k, ROOT, random_share=0.5)
    positions, _ = policy.positions(0)
    for r in range(6):
        policy.observe(r, positions, np.linspace(1.0, 2.0, k), None)
        positions, _ = policy.positions(r + 1)
        assert_index_set(positions, length, k)


def test_prev_topk_random_share_comes_from_the_public_seed_not_from_the_values():
    k, length = 20, 300
    policy, twin, later = (IndexPolicy("prev_topk", length, k, ROOT, random_share=0.25) for _ in range(3))
    positions = policy.positions(0)[0]
    aggregate = np.linspace(1.0, 20.0, k)
    rescaled = aggregate ** 3  # the same order of magnitudes, other values
    policy.observe(0, positions, aggregate, None)
    twin.observe(0, positions, rescaled, None)
    later.observe(1, positions, aggregate, None)  # the next round's public seed draws other random positions
    np.testing.assert_array_equal(policy.positions(1)[0], twin.positions(1)[0])
    kept = largest_magnitudes(positions, aggregate, 15)
    assert set(policy.positions(1)[0].tolist()) - kept != set(later.positions(2)[0].tolist()) - kept
    assert kept <= set(later.positions(2)[0].tolist())


def test_prev_topk_follows_its_own_previous_set_round_after_round():
    k, length = 10, 100
    policy = IndexPolicy("prev_topk", length, k, ROOT, random_share=0.3)
    rng = np.random.default_rng(5)
    for r in range(4):
        positions = policy.positions(r)[0]
        aggregate = rng.permutation(k) + 1.0
        policy.observe(r, positions, aggregate, None)
        following = policy.positions(r + 1)[0]
        assert_index_set(following, length, k)
        assert largest_magnitudes(positions, aggregate, 7) <= set(following.tolist())


# --- sketch and its fallback -----------------------------------------------------------------------


def shape_reference(length, k, rows, cols_per_k):
    """The most columns, up to the wanted ceil(cols_per_k * k), whose rows x cols table has at least k cells
    and leaves the upload (k values + table) at most length - k cells; None when no column count does."""
    fitting = [cols for cols in range(1, math.ceil(cols_per_k * k) + 1) if k <= rows * cols <= length - 2 * k]
    return (rows, max(fitting)) if fitting else None


@pytest.mark.parametrize("length, k, rows, cols_per_k, shape", [
    (1000, 10, 1, 2.0, (1, 20)),  # the wanted sketch fits
    (100, 30, 1, 2.0, (1, 40)),  # capped at length - 2k = 40 cells, still >= k
    (100, 20, 3, 2.0, (3, 20)),  # capped: 3 x 40 > 60, so 60 // 3 = 20 columns
    (30, 10, 1, 2.0, (1, 10)),  # capped to exactly k cells
    (29, 10, 1, 2.0, None),  # capped to 9 < k cells
    (100, 40, 1, 2.0, None),  # 20 cells left, fewer than k
    (12, 1, 5, 2.0, (5, 2)),
    (5, 1, 5, 2.0, None),  # 3 cells left: not one column of 5 rows
    (10, 5, 1, 2.0, None),  # no room at all: length - 2k = 0
])
def test_sketch_shape_caps_the_table_at_length_minus_2k_cells_and_needs_k_of_them(length, k, rows, cols_per_k,
                                                                                 shape):
    assert sketch_shape(length, k, rows, cols_per_k) == shape == shape_reference(length, k, rows, cols_per_k)


@given(length=st.integers(1, 400), k_share=st.floats(0.0, 1.0), rows=st.integers(1, 6),
       cols_per_k=st.sampled_from([0.5, 1.0, 1.5, 2.0, 4.0]))
def test_sketch_shape_is_the_largest_table_within_the_cap(length, k_share, rows, cols_per_k):
    k = max(1, round(k_share * length))
    assert sketch_shape(length, k, rows, cols_per_k) == shape_reference(length, k, rows, cols_per_k)


def test_sketch_columns_read_cols_per_k_as_the_decimal_it_prints_as():
    """ceil(1.1 * 50) is 55 columns; in binary 1.1 * 50 is 55.00000000000001, whose ceiling is 56."""
    assert sketch_shape(10_000, 50, 1, 1.1) == (1, 55)
    assert sketch_shape(10_000, 50, 2, 2.0) == (2, 100)


@pytest.mark.parametrize("length", [40, 100, 101])
def test_sketch_falls_back_to_randk_exactly_when_no_sketch_fits(length):
    fallbacks = 0
    for k in range(1, length):
        policy = IndexPolicy("sketch", length, k, ROOT)
        shape = sketch_shape(length, k, 1, 2.0)  # the policy's default sketch: 1 row, 2k columns
        assert policy.shape == shape
        assert policy.name == ("randk(sketch fallback)" if shape is None else "sketch")
        if shape is None:
            fallbacks += 1
            assert policy.sketch(0) is None
            for r in range(3):
                positions, seed = policy.positions(r)
                np.testing.assert_array_equal(positions, IndexPolicy("randk", length, k, ROOT).positions(r)[0])
                assert seed == public_seed(ROOT, r, 1)
        else:
            sketch = policy.sketch(0)
            assert (sketch.rows, sketch.cols, sketch.length) == (*shape, length)
    assert 0 < fallbacks < length - 1  # both branches are exercised


@pytest.mark.parametrize("name, summary", [("sketch", "sketch"), ("randk", "sketch"), ("prev_topk", "sketch"),
                                           *[("fresh", s)
                                             for s in ("marginals", "blocks", "sketch", "exact", "energy")]])
def test_every_policy_sends_everything_as_all_when_k_is_the_length(name, summary):
    """No table rides with the values when every position is sent: under `fresh` the summary would choose nothing
    (masking without compression keeps the default policy, `fresh` with marginals)."""
    policy = IndexPolicy(name, 50, 50, ROOT, summary=summary, shapes=[(5, 10)])
    assert not policy.fresh
    assert policy.name == "all" and policy.shape is None and policy.sketch(0) is None
    for r in range(2):
        positions, seed = policy.positions(r)
        np.testing.assert_array_equal(positions, np.arange(50))
        assert seed == 0 and positions.dtype == np.int64
        policy.observe(r, positions, np.arange(50, dtype=np.float32), None)


def test_sketch_round_zero_and_a_round_without_a_table_use_the_public_random_set():
    policy = IndexPolicy("sketch", 2000, 5, ROOT, sketch_rows=5, sketch_cols_per_k=40)
    positions, seed = policy.positions(0)
    assert seed == public_seed(ROOT, 0, 1)
    np.testing.assert_array_equal(positions, random_positions(2000, 5, seed))
    policy.observe(0, positions, np.ones(5, np.float32), None)
    positions, seed = policy.positions(1)
    assert seed == public_seed(ROOT, 1, 1)
    np.testing.assert_array_equal(positions, random_positions(2000, 5, seed))


def test_sketch_policy_next_set_is_the_heavy_hitters_of_the_observed_table():
    length, k = 2000, 5
    policy = IndexPolicy("sketch", length, k, ROOT, sketch_rows=5, sketch_cols_per_k=40)
    assert policy.name == "sketch" and policy.shape == (5, 200)
    sketch = policy.sketch(0)
    assert policy.sketch(0) is sketch  # one sketch per round, its hashes from the round's public seed
    rebuilt = CountSketch(5, 200, length, public_seed(ROOT, 0, 2))
    assert np.array_equal(sketch.buckets, rebuilt.buckets) and np.array_equal(sketch.signs, rebuilt.signs)
    assert not np.array_equal(policy.sketch(1).buckets, rebuilt.buckets)
    spikes = np.array([17, 250, 999, 1500, 1999])
    residual = np.zeros(length, np.float32)
    residual[spikes] = [300.0, -500.0, 700.0, -900.0, 1100.0]
    table = policy.sketch(1).sketch(residual)
    policy.observe(1, policy.positions(1)[0], np.zeros(k, np.float32), table)
    following, seed = policy.positions(2)
    assert seed == 0  # the server sends the positions
    np.testing.assert_array_equal(following, policy.sketch(1).heavy_hitters(table, k))
    np.testing.assert_array_equal(following, spikes)
    np.testing.assert_array_equal(policy.positions(2)[0], following)
    # round 2 aborts (the server observes nothing): round 3 keeps the last set, not a random one
    kept, seed = policy.positions(3)
    assert seed == 0
    np.testing.assert_array_equal(kept, following)


# --- refused arguments -----------------------------------------------------------------------------


def test_unknown_policy_names_are_refused():
    for name in ("topk", "Sketch", "all", "randk(sketch fallback)", ""):
        with pytest.raises(ValueError, match="unknown index policy"):
            IndexPolicy(name, 100, 10, ROOT)


@pytest.mark.parametrize("k", [0, -1, 101])
def test_k_outside_one_to_length_is_refused(k):
    for name in ("sketch", "randk", "prev_topk"):
        with pytest.raises(ValueError, match=r"k must be in \[1, 100\]"):
            IndexPolicy(name, 100, k, ROOT)


def test_block_energies_are_per_block_sums_of_squares_and_the_heaviest_blocks_are_taken_whole():
    from compression.blocks import BlockEnergy

    rng = np.random.default_rng(0)
    v = rng.normal(size=1000).astype(np.float32)
    blocks = BlockEnergy(1000, 64)  # 16 blocks, the last of 40 entries
    table = blocks.sketch(v)
    assert table.shape == (1, 16)
    np.testing.assert_allclose(table[0, :15], (v[:960].astype(np.float64) ** 2).reshape(15, 64).sum(1), rtol=1e-6)
    np.testing.assert_allclose(table[0, 15], (v[960:].astype(np.float64) ** 2).sum(), rtol=1e-6)
    energies = np.arange(16, dtype=np.float32)  # block 15 (40 entries) heaviest, then 14, 13, ...
    for k in (1, 40, 41, 100, 1000):
        pos = blocks.heavy_hitters(energies.reshape(1, 16), k)
        assert len(pos) == k and np.all(np.diff(pos) > 0)
        expected = np.concatenate([np.arange(960, 1000), *(np.arange(b * 64, (b + 1) * 64) for b in range(14, -1, -1))])
        np.testing.assert_array_equal(pos, np.sort(expected[:k]))
    with pytest.raises(ValueError, match="expected 16 block energies"):
        blocks.heavy_hitters(np.zeros(15), 10)
    with pytest.raises(ValueError, match="NaN or Inf"):
        blocks.heavy_hitters(np.full(16, np.nan), 10)


def test_fresh_chooses_mid_round_so_the_broadcast_carries_no_index_set():
    policy = IndexPolicy("fresh", 10_000, 100, ROOT, summary="blocks", block=32)
    assert policy.fresh and policy.name == "fresh(blocks of 32)" and policy.shape == (1, 313)
    assert policy.positions(3) == (None, 0)
    table = np.zeros((1, 313), np.float32)
    table[0, 7], table[0, 100] = 5.0, 9.0
    np.testing.assert_array_equal(policy.choose(3, table),
                                  np.sort(np.concatenate([np.arange(3200, 3232), np.arange(224, 256),
                                                          np.arange(0, 32), np.arange(32, 36)])))
    sketched = IndexPolicy("fresh", 10_000, 100, ROOT, sketch_rows=3, sketch_cols_per_k=2.0, summary="sketch")
    assert sketched.fresh and sketched.name == "fresh" and sketched.shape == (3, 200)
    with pytest.raises(ValueError, match="unknown fresh summary"):
        IndexPolicy("fresh", 10_000, 100, ROOT, summary="bloom")


@pytest.mark.parametrize("k, share", [(20, 0.0), (4, 0.1), (1, 0.1)])
def test_prev_topk_explores_at_least_one_new_position_even_when_the_share_rounds_to_zero(k, share):
    """share * k rounds to 0 here, yet one position is drawn at random (n_random >= 1): without it prev_topk would
    resend its previous set forever. (Asserting that exactly one position is new would also pass when the set is
    just resent, since the top k - 1 leave one previous position out: the set itself must change.)"""
    length = 300
    policy = IndexPolicy("prev_topk", length, k, ROOT, random_share=share)
    positions, _ = policy.positions(0)
    policy.observe(0, positions, np.arange(k, 0, -1, dtype=np.float64), None)
    following, _ = policy.positions(1)
    assert len(following) == k
    assert set(following.tolist()) != set(positions.tolist())  # with these public seeds the draw is a new position
