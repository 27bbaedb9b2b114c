"""Position encodings (bitmap, varint, uint16, Golomb-Rice) and top-k selection, against plain-Python references."""

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression import DecodeError, topk_positions
from position_reference import (
    leb128,
    pack_bits,
    reference_bitmap,
    reference_block,
    reference_position_sizes,
    reference_rice,
    reference_rice_parameter,
    reference_rice_size,
    reference_uint16,
    reference_varint,
)
from compression.positions import (
    BITMAP,
    ENCODING_NAMES,
    RICE,
    UINT16,
    VARINT,
    _rice_encode,
    _rice_lower_bound,
    _rice_parameter,
    _sampled_threshold,
    _select,
    decode_positions,
    encode_positions,
    position_sizes,
    sample_index,
    unpack_positions,
)

# --- strategies -------------------------------------------------------------------------------


@st.composite
def position_sets(draw, max_n=200_000):
    """Sorted distinct positions: uniform, clustered or evenly spaced, from sparse to dense."""
    n = draw(st.integers(1, max_n))
    k = draw(st.integers(1, min(n, 3000)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from(["uniform", "cluster", "even", "prefix"]))
    if shape == "uniform":
        positions = rng.choice(n, k, replace=False)
    elif shape == "cluster":
        start = int(rng.integers(0, n - k + 1))
        positions = start + rng.choice(min(n - start, 3 * k), k, replace=False)
    elif shape == "even":
        positions = np.linspace(0, n - 1, k).astype(np.int64)
        positions = np.unique(positions)
    else:
        positions = np.arange(k)
    return np.sort(positions).astype(np.int64), n


# --- encodings ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(position_sets())
def test_encode_positions_matches_the_reference_byte_for_byte(case):
    positions, n = case
    if len(positions) > 400 and n > 20_000:  # keep the bit-at-a-time reference fast
        positions = positions[:400]
    assert encode_positions(positions, n) == reference_block(positions, n)


@settings(max_examples=60, deadline=None)
@given(position_sets())
def test_every_encoding_decodes_its_reference_bytes(case):
    positions, n = case
    positions = positions[:300]
    k = len(positions)
    for encoding, data in ((BITMAP, reference_bitmap(positions, n)), (VARINT, reference_varint(positions)),
                           (UINT16, reference_uint16(positions, n)),
                           (RICE, reference_rice(positions, reference_rice_parameter(positions)))):
        decoded, used = unpack_positions(encoding, np.frombuffer(data + b"\x00\x01\xff", dtype=np.uint8), n, k)
        assert used == len(data), ENCODING_NAMES[encoding]
        assert decoded.tolist() == positions.tolist(), ENCODING_NAMES[encoding]


@settings(max_examples=60, deadline=None)
@given(position_sets())
def test_the_chosen_encoding_is_the_smallest_and_sizes_match_the_formulas(case):
    positions, n = case
    sizes = position_sizes(positions, n)
    block = encode_positions(positions, n)
    assert len(block) == 1 + min(sizes.values())
    assert block[0] == min(range(4), key=lambda e: (sizes[ENCODING_NAMES[e]], e))
    if len(positions) <= 400:
        assert sizes == reference_position_sizes(positions, n)
    assert decode_positions(block, n, len(positions)).tolist() == positions.tolist()


@settings(max_examples=60, deadline=None)
@given(position_sets())
def test_rice_parameter_search_is_within_one_percent_of_the_best_parameter(case):
    positions, _ = case
    deltas = np.diff(positions, prepend=-1) - 1
    b, size = _rice_parameter(deltas)
    best = min(reference_rice_size(deltas.tolist(), c) for c in range(33))
    assert size <= max(best * 1.01, best + 1)


@settings(max_examples=60, deadline=None)
@given(position_sets())
def test_rice_lower_bound_never_exceeds_the_rice_size(case):
    positions, _ = case
    deltas = (np.diff(positions, prepend=-1) - 1).tolist()
    assert _rice_lower_bound(len(positions), int(positions[-1])) <= min(reference_rice_size(deltas, b)
                                                                        for b in range(33))


def test_the_rice_parameter_walks_from_the_mean_gap_so_a_plateau_keeps_the_end_it_reaches_first():
    """One position, 845: b = 7 and b = 8 both take 3 bytes. The documented start, floor(log2(846 ln 2)) = 9, walks
    down to 8 and stops there, where a search from b = 0 would stop at 7 (the parameter byte is on the wire)."""
    deltas = np.array([845], dtype=np.int64)
    assert _rice_parameter(deltas) == (8, 3) and reference_rice_parameter([845]) == 8


def test_rice_layout_byte_for_byte():
    positions = np.array([3, 4, 20, 21, 100])  # deltas 3, 0, 15, 0, 78
    block = _rice_encode(np.array([3, 0, 15, 0, 78]), 2)
    remainders = [1, 1, 0, 0, 1, 1, 0, 0, 0, 1]  # 3 = 11, 0 = 00, 15 = 11 (mod 4), 0, 78 = 10 (mod 4)
    unary = [1, 1, 0, 0, 0, 1, 1] + [0] * 19 + [1]  # quotients 0, 0, 3, 0, 19
    assert block == bytes([2]) + pack_bits(remainders) + pack_bits(unary)
    assert block == reference_rice(positions, 2)


def test_uint16_blocks_cover_lengths_beyond_65536():
    n = 200_000
    positions = np.array([1, 65535, 65536, 131071, 199_999])
    data = reference_uint16(positions, n)
    assert data[:4] == bytes([2, 2, 0, 1])  # four blocks: 2, 2, 0 and 1 positions
    decoded, used = unpack_positions(UINT16, np.frombuffer(data, np.uint8), n, 5)
    assert decoded.tolist() == positions.tolist() and used == len(data)


# --- strict decoding --------------------------------------------------------------------------


def decode(encoding, data, n, k):
    return unpack_positions(encoding, np.frombuffer(bytes(data), dtype=np.uint8), n, k)


def test_rice_rejects_bad_parameter_padding_truncation_and_overrun():
    good = reference_rice(np.array([3, 4, 20, 21, 100]), 2)
    with pytest.raises(DecodeError, match="rice parameter 33 out of range"):
        decode(RICE, bytes([33]) + good[1:], 200, 5)
    with pytest.raises(DecodeError, match="padding bits"):  # a remainder padding bit
        decode(RICE, good[:2] + bytes([good[2] | 0x80]) + good[3:], 200, 5)
    with pytest.raises(DecodeError, match="padding bits"):  # a unary padding bit after the last one
        decode(RICE, good[:-1] + bytes([good[-1] | 0x80]), 200, 5)
    for cut in range(len(good)):
        with pytest.raises(DecodeError):
            decode(RICE, good[:cut], 200, 5)
    with pytest.raises(DecodeError, match="run past length 100"):
        decode(RICE, good, 100, 5)
    with pytest.raises(DecodeError, match="run past length 100"):  # a long run of zeros: no valid quotient
        decode(RICE, bytes([0]) + b"\x00" * 40, 100, 5)


def test_uint16_rejects_bad_counts_and_offsets():
    with pytest.raises(DecodeError, match="block counts sum to 2, expected k=3"):
        decode(UINT16, leb128(2) + b"\x01\x00\x02\x00", 100, 3)
    with pytest.raises(DecodeError, match="claims 101 positions"):
        decode(UINT16, leb128(101) + b"\x00" * 202, 100, 101)
    with pytest.raises(DecodeError, match="not strictly increasing"):
        decode(UINT16, leb128(2) + b"\x05\x00\x05\x00", 100, 2)
    with pytest.raises(DecodeError, match="index 150 out of range for length 100"):
        decode(UINT16, leb128(1) + (150).to_bytes(2, "little"), 100, 1)
    with pytest.raises(DecodeError, match="truncated"):
        decode(UINT16, leb128(2) + b"\x05\x00", 100, 2)


def test_decode_positions_rejects_unknown_encoding_bad_k_and_trailing_bytes():
    block = encode_positions(np.array([1, 5]), 100)
    with pytest.raises(DecodeError, match="unknown position block encoding 4"):  # a shared set, not a topk payload
        decode_positions(bytes([4]) + block[1:], 100, 2)
    with pytest.raises(DecodeError, match="position block index 100 out of range for length 100"):
        decode_positions(encode_positions(np.array([1, 100]), 101), 100, 2)
    with pytest.raises(DecodeError, match="position block k=0 out of range"):
        decode_positions(block, 100, 0)
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode_positions(block + b"\x00", 100, 2)
    with pytest.raises(DecodeError, match="no encoding byte"):
        decode_positions(b"", 100, 2)


# --- selection ----------------------------------------------------------------------------------


@st.composite
def magnitudes(draw):
    n = draw(st.integers(4096, 40_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["normal", "ties", "heavy", "constant", "sparse"]))
    if kind == "normal":
        vector = rng.standard_normal(n)
    elif kind == "ties":
        vector = rng.integers(-3, 4, n)
    elif kind == "heavy":
        vector = rng.standard_cauchy(n)
    elif kind == "constant":
        vector = np.full(n, 2.5)
    else:
        vector = np.where(rng.random(n) < 0.01, rng.standard_normal(n), 0.0)
    return np.abs(vector.astype(np.float32)), draw(st.floats(1e-4, 1.0))


@settings(max_examples=50, deadline=None)
@given(magnitudes(), st.integers(0, 1000))
def test_sampled_threshold_keeps_exactly_the_same_entries_as_the_exact_one(case, seed):
    magnitude, ratio = case
    k = max(1, min(magnitude.size, math.ceil(ratio * magnitude.size)))
    exact, exact_mask = _select(magnitude, k, None)
    sampled, sampled_mask = _select(magnitude, k, sample_index(magnitude.size, seed))
    assert np.array_equal(sampled, exact) and np.array_equal(sampled_mask, exact_mask)
    assert exact.size == k and np.flatnonzero(exact_mask).tolist() == exact.tolist()


def test_a_sample_that_misses_falls_back_to_the_exact_threshold():
    magnitude = np.arange(10_000, dtype=np.float32)
    unlucky = np.zeros(1024, dtype=np.int64)  # every sample draw hit entry 0
    assert _sampled_threshold(magnitude, 100, unlucky) is None
    positions, _ = _select(magnitude, 100, unlucky)
    assert positions.tolist() == list(range(9900, 10_000))


def test_sampled_threshold_brackets_from_the_sample_and_partitions_only_the_band():
    magnitude = np.random.default_rng(0).random(100_000).astype(np.float32)
    threshold = _sampled_threshold(magnitude, 5000, sample_index(100_000, 0))
    assert threshold == np.partition(magnitude, 95_000)[95_000]


def test_short_vectors_are_not_sampled():
    assert sample_index(4095) is None and sample_index(4096).size == 1024
    assert sample_index(10**6).size == 16_000


def test_topk_positions_with_a_sample_equals_without():
    vector = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    assert np.array_equal(topk_positions(vector, 777, sample_index(50_000)), topk_positions(vector, 777))


def test_a_tie_goes_to_the_earlier_encoding_even_when_the_later_one_is_sized_first():
    """Rice's lower bound (8) is below varint's (9), so rice is sized first; both take 9 bytes: varint, the
    earlier encoding, is chosen (as a bound that only equals the best so far must still be sized)."""
    positions, n = np.array([23, 49, 83, 84, 117, 123, 171, 204, 206], dtype=np.int64), 227
    sizes = position_sizes(positions, n)
    assert sizes["varint"] == sizes["rice"] == 9 < min(sizes["bitmap"], sizes["uint16"])
    assert _rice_lower_bound(9, 206) < 9
    assert encode_positions(positions, n)[0] == VARINT


@pytest.mark.parametrize("target", [0, 998, 8_998, 8_999, 9_000, 9_001, 9_999])
def test_a_sampled_threshold_is_the_exact_kth_largest_or_none_whatever_the_sample(target):
    """A sample that drew one entry over and over brackets the threshold anywhere (below it, at the entry just
    below the top k, at it, above it): the result is still the k-th largest magnitude, or None (a full partition)."""
    magnitude = np.arange(10_000, dtype=np.float32)
    k = 1000
    threshold = _sampled_threshold(magnitude, k, np.full(1024, target, dtype=np.int64))
    assert threshold is None or threshold == 9_000
    positions, _ = _select(magnitude, k, np.full(1024, target, dtype=np.int64))
    assert positions.tolist() == list(range(9_000, 10_000))


def test_rice_remainders_cut_short_are_refused_as_truncated_remainders():
    """The remainders' own size check names the part that is missing (not the packing helper's byte count)."""
    from compression.rice import _rice_decode, _rice_deltas, _rice_encode

    positions = np.array([5, 100, 300], dtype=np.int64)
    data = np.frombuffer(_rice_encode(_rice_deltas(positions), 4), np.uint8)  # 2 bytes of 4-bit remainders
    assert _rice_decode(data, 1000, 3, "topk")[0].tolist() == positions.tolist()
    for cut in (1, 2):
        with pytest.raises(DecodeError, match="rice remainders need 2 bytes"):
            _rice_decode(data[:cut], 1000, 3, "topk")


@pytest.mark.parametrize("n", [10, 65536 + 10])
def test_a_uint16_offset_landing_exactly_on_the_length_is_out_of_range(n):
    """The last block holds n - (blocks - 1) * 65536 positions: an offset equal to that is position n."""
    from compression.positions import UINT16, unpack_positions

    blocks = (n + 65535) // 65536
    counts = bytes([0] * (blocks - 1) + [1])
    last = n - (blocks - 1) * 65536
    ok = np.frombuffer(counts + struct.pack("<H", last - 1), np.uint8)
    assert unpack_positions(UINT16, ok, n, 1)[0].tolist() == [n - 1]
    with pytest.raises(DecodeError, match=f"index {n} out of range for length {n}"):
        unpack_positions(UINT16, np.frombuffer(counts + struct.pack("<H", last), np.uint8), n, 1)


def test_a_rice_unary_part_without_enough_ones_in_its_longest_window_runs_past_the_length():
    """n = 8, k = 1, b = 0: the quotient is at most 7, so one byte bounds the unary part; a zero byte there
    (and nothing after) is a position past the end, not a stream cut short."""
    from compression.rice import _rice_decode

    assert _rice_decode(np.array([0, 0x80], np.uint8), 8, 1, "topk")[0].tolist() == [7]
    with pytest.raises(DecodeError, match="rice positions run past length 8"):
        _rice_decode(np.array([0, 0x00], np.uint8), 8, 1, "topk")
