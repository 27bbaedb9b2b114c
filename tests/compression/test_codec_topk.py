"""TopKCompression: which entries it keeps, its byte layout and size, and how decoding fails."""

import math
import struct

import numpy as np
import pytest

from compression import DecodeError, TopKCompression, topk_count, topk_positions
from compression.positions import _varint_decode, _varint_encode

from position_reference import leb128, reference_position_sizes


def reference_positions(vector, k):
    """Largest magnitudes first, ties to the lowest index (a stable sort), returned sorted."""
    return np.sort(np.argsort(-np.abs(vector), kind="stable")[:k])


def reference_size(positions, n):
    """10 header bytes + the smallest position encoding (reference sizes in test_positions) + 4k."""
    return 10 + min(reference_position_sizes(positions, n).values()) + 4 * len(positions)


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def indices_payload(n, gaps, values=None, k=None):
    """Hand-made payload with delta-varint positions."""
    values = np.ones(len(gaps), dtype="<f4") if values is None else np.asarray(values, dtype="<f4")
    header = struct.pack("<BBII", 2, 1, n, len(gaps) if k is None else k)
    return header + b"".join(leb128(g) for g in gaps) + values.tobytes()


SHAPES = [(1, 1.0), (7, 0.5), (13, 1.0), (100, 0.01), (1001, 0.3), (12345, 0.02), (100_000, 0.001), (4099, 0.9)]


@pytest.mark.parametrize("n,ratio", SHAPES)
def test_keeps_exactly_the_k_largest_magnitudes_bitwise_and_zeros_the_rest(n, ratio):
    vector = random_vector(n)
    k = math.ceil(ratio * n)
    decoded = TopKCompression(ratio).decode(TopKCompression(ratio).encode(vector), n)
    kept = reference_positions(vector, k)
    assert np.array_equal(np.flatnonzero(decoded), kept)
    assert np.array_equal(decoded[kept].view(np.uint32), vector[kept].view(np.uint32))
    assert decoded.dtype == np.float32


@pytest.mark.parametrize(
    "n,ratio,k",
    [(10, 0.5, 5), (11, 0.5, 6), (100, 0.07, 7), (10, 0.7, 7), (1000, 0.0001, 1), (3, 1.0, 3), (3, 0.34, 2)],
)
def test_k_is_ceil_of_ratio_times_n_reading_ratio_as_written(n, ratio, k):
    # 0.07 * 100 == 7.000000000000001 in binary floating point; the config means 7.
    assert topk_count(n, ratio) == k
    assert TopKCompression(ratio).k_for(n) == k
    # a numpy float (a ratio from np.linspace, say) as it prints: np.float32(0.07) is 0.07000000029802322 in float64
    assert TopKCompression(np.float32(ratio)).k_for(n) == TopKCompression(np.float64(ratio)).k_for(n) == k


def test_ties_at_the_threshold_keep_exactly_k_lowest_index_first():
    assert topk_positions(np.ones(10, dtype=np.float32), 4).tolist() == [0, 1, 2, 3]
    vector = np.array([3, -3, 1, 3, 0, -3, 5], dtype=np.float32)
    assert topk_positions(vector, 3).tolist() == [0, 1, 6]
    assert topk_positions(vector, 5).tolist() == [0, 1, 3, 5, 6]
    payload = TopKCompression(0.35).encode(np.ones(10, dtype=np.float32))
    positions, _ = TopKCompression(0.35).decode_sparse(payload, 10)
    assert positions.tolist() == [0, 1, 2, 3]


def test_topk_positions_matches_a_sorted_reference_and_returns_int64():
    vector = np.round(random_vector(5000, seed=3), 1)  # rounding makes many ties
    for k in (1, 17, 2500, 4999, 5000):
        positions = topk_positions(vector, k)
        assert positions.dtype == np.int64
        assert np.array_equal(positions, reference_positions(vector, k))


def test_topk_positions_rejects_k_outside_1_to_n():
    for k in (0, 6):
        with pytest.raises(ValueError, match="k must be in"):
            topk_positions(np.ones(5), k)


@pytest.mark.parametrize("n,ratio", SHAPES)
def test_payload_size_equals_the_documented_formula(n, ratio):
    vector = random_vector(n, seed=1)
    codec = TopKCompression(ratio)
    payload = codec.encode(vector)
    positions = reference_positions(vector, math.ceil(ratio * n))
    assert len(payload) == reference_size(positions, n)
    assert codec.encoded_size(positions, n) == len(payload)
    assert codec.size(n) >= len(payload)  # size(n) is the worst case over positions


def test_the_smaller_position_encoding_is_chosen():
    codec = TopKCompression(0.5)
    assert codec.position_encoding(codec.encode(random_vector(1000))) == "bitmap"
    codec = TopKCompression(0.001)
    assert codec.position_encoding(codec.encode(random_vector(100_000))) == "rice"
    vector = random_vector(65536)
    assert codec.position_encoding(codec.encode_at(vector, np.arange(0, 65536, 100))) == "varint"  # gaps of 100
    assert codec.position_encoding(codec.encode_at(vector, np.array([20000, 40000, 60000]))) == "uint16"


def test_equal_sizes_choose_the_earlier_encoding_bitmap_first():
    codec, vector = TopKCompression(), random_vector(16)  # bitmap 2 bytes, varint 2, rice 2: a three-way tie
    assert reference_position_sizes(np.array([0, 1]), 16)["varint"] == 2
    assert codec.position_encoding(codec.encode_at(vector, np.array([0, 1]))) == "bitmap"
    assert codec.position_encoding(codec.encode_at(vector, np.array([5]))) == "varint"  # varint 1 byte, rice 3


def test_bitmap_layout_byte_for_byte():
    n, positions = 13, np.array([0, 2, 3, 8, 12, 11])
    positions.sort()
    vector = random_vector(n)
    payload = TopKCompression().encode_at(vector, positions)
    bits = [0] * 16
    for p in positions:
        bits[p] = 1
    bitmap = bytes(sum(bits[8 * b + i] << i for i in range(8)) for b in range(2))
    values = b"".join(struct.pack("<f", vector[p]) for p in positions)
    assert payload == struct.pack("<BBII", 2, 0, n, len(positions)) + bitmap + values
    assert len(payload) == 10 + math.ceil(n / 8) + 4 * len(positions)


def test_indices_layout_byte_for_byte():
    n, positions = 3_000_000, np.array([5, 200, 20_000, 2_500_000])
    vector = random_vector(n)
    payload = TopKCompression().encode_at(vector, positions)
    gaps = [5, 195, 19_800, 2_480_000]
    values = b"".join(struct.pack("<f", vector[p]) for p in positions)
    assert payload == struct.pack("<BBII", 2, 1, n, 4) + b"".join(leb128(g) for g in gaps) + values
    assert len(payload) == 10 + (1 + 2 + 3 + 4) + 16
    positions_back, values_back = TopKCompression().decode_sparse(payload, n)
    assert positions_back.tolist() == positions.tolist()
    assert np.array_equal(values_back, vector[positions])


def test_varints_match_reference_leb128_up_to_uint32_max():
    values = np.array([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1], dtype=np.int64)
    encoded = _varint_encode(values)
    assert encoded == b"".join(leb128(int(v)) for v in values)
    decoded, used = _varint_decode(np.frombuffer(encoded + b"\x07", dtype=np.uint8), len(values))
    assert decoded.tolist() == values.tolist() and used == len(encoded)


def test_decode_returns_a_new_writable_array_and_encode_leaves_input_alone():
    vector = random_vector(100)
    before = vector.copy()
    codec = TopKCompression(0.1)
    decoded = codec.decode(codec.encode(vector), 100)
    decoded[:] = 1.0  # must not fail (read-only view of the payload) or alias the input
    assert np.array_equal(vector, before)


def test_float64_and_integer_input_are_encoded_as_float32():
    codec = TopKCompression(1.0)
    assert codec.decode(codec.encode(np.arange(5, dtype=np.int64)), 5).tolist() == [0, 1, 2, 3, 4]
    assert codec.decode(codec.encode(np.array([0.1, -2.0])), 2).tolist() == [np.float32(0.1), -2.0]


# --- encode refuses bad input ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300])
def test_encode_rejects_nan_and_inf_including_float32_overflow(bad):
    vector = np.zeros(10)
    vector[3] = bad
    with pytest.raises(ValueError, match="contains NaN or Inf"):
        TopKCompression().encode(vector)


def test_encode_rejects_non_1d_and_empty_input():
    with pytest.raises(ValueError, match="1-D"):
        TopKCompression().encode(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="1-D"):
        TopKCompression().encode(np.float32(1.0))
    with pytest.raises(ValueError, match="empty"):
        TopKCompression().encode(np.zeros(0, dtype=np.float32))


@pytest.mark.parametrize("ratio", [0, -0.1, 1.5, float("nan"), float("inf")])
def test_ratio_outside_0_to_1_is_rejected(ratio):
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
        TopKCompression(ratio)


@pytest.mark.parametrize("positions", [[3, 3], [4, 2], [-1, 2], [2, 10], []])
def test_encode_at_rejects_positions_that_are_not_strictly_increasing_in_range(positions):
    with pytest.raises(ValueError):
        TopKCompression().encode_at(random_vector(10), np.array(positions, dtype=np.int64))


# --- decode refuses malformed payloads --------------------------------------------------------

TRUNCATION_CASES = [(20, 0.5), (1000, 0.003), (3000, 0.05)]  # bitmap, varint and rice payloads


def test_truncation_cases_cover_three_encodings():
    encodings = {TopKCompression.position_encoding(TopKCompression(ratio).encode(random_vector(n)))
                 for n, ratio in TRUNCATION_CASES}
    assert encodings == {"bitmap", "varint", "rice"}


@pytest.mark.parametrize("n,ratio", TRUNCATION_CASES)
def test_every_truncation_raises_decode_error(n, ratio):
    codec = TopKCompression(ratio)
    payload = codec.encode(random_vector(n))
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], n)


def test_truncated_message_names_expected_and_actual_size():
    codec = TopKCompression(0.5)
    payload = codec.encode(random_vector(20))
    with pytest.raises(DecodeError, match=f"truncated: expected {len(payload)} bytes, got {len(payload) - 3}"):
        codec.decode(payload[:-3], 20)


@pytest.mark.parametrize("n,ratio", TRUNCATION_CASES)
def test_trailing_bytes_raise_decode_error(n, ratio):
    codec = TopKCompression(ratio)
    payload = codec.encode(random_vector(n))
    for extra in (b"\x00", b"\x80", b"\x01\x02\x03\x04"):
        with pytest.raises(DecodeError, match="trailing bytes"):
            codec.decode(payload + extra, n)


@pytest.mark.parametrize("version", [0, 1, 3, 255])
def test_other_format_version_is_rejected(version):
    payload = bytearray(TopKCompression().encode(random_vector(20)))
    payload[0] = version
    with pytest.raises(DecodeError, match=f"unsupported topk format version {version} \\(expected 2\\)"):
        TopKCompression().decode(bytes(payload), 20)


def test_unknown_position_encoding_is_rejected():
    payload = bytearray(TopKCompression().encode(random_vector(20)))
    payload[1] = 7
    with pytest.raises(DecodeError, match="unknown topk position encoding 7"):
        TopKCompression().decode(bytes(payload), 20)
    with pytest.raises(DecodeError, match="unknown topk position encoding 7"):
        TopKCompression.position_encoding(bytes(payload))


def test_payload_for_another_length_is_rejected():
    payload = TopKCompression().encode(random_vector(20))
    with pytest.raises(DecodeError, match="for length 20, but length 21"):
        TopKCompression().decode(payload, 21)


@pytest.mark.parametrize("k", [0, 101])
def test_k_outside_1_to_n_is_rejected(k):
    with pytest.raises(DecodeError, match=f"k={k} out of range"):
        TopKCompression().decode(indices_payload(100, [1], k=k), 100)


def test_index_out_of_range_is_rejected():
    with pytest.raises(DecodeError, match="topk index 9999 out of range for length 100"):
        TopKCompression().decode(indices_payload(100, [9999]), 100)
    with pytest.raises(DecodeError, match="topk index 100 out of range for length 100"):
        TopKCompression().decode(indices_payload(100, [50, 40, 10]), 100)
    # gaps this large would overflow a naive int64 cumulative sum
    with pytest.raises(DecodeError, match="out of range for length 100"):
        TopKCompression().decode(indices_payload(100, [2**34] * 5), 100)


def test_repeated_index_is_rejected():
    with pytest.raises(DecodeError, match="topk indices not strictly increasing"):
        TopKCompression().decode(indices_payload(100, [5, 0]), 100)


def test_truncated_overlong_and_non_minimal_varints_are_rejected():
    header = struct.pack("<BBII", 2, 1, 100, 1)
    with pytest.raises(DecodeError, match="truncated"):
        TopKCompression().decode(header + b"\x80", 100)
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        TopKCompression().decode(header + b"\x81\x80\x80\x80\x80\x00" + b"\x00" * 4, 100)
    with pytest.raises(DecodeError, match="not minimally encoded"):
        TopKCompression().decode(header + b"\x85\x00" + b"\x00" * 4, 100)


def test_bitmap_with_wrong_popcount_or_bits_beyond_n_is_rejected():
    codec = TopKCompression(0.5)
    payload = bytearray(codec.encode(np.arange(1, 14, dtype=np.float32)))  # n=13, k=7: positions 6..12
    wrong_count = bytearray(payload)
    wrong_count[10] |= 1  # also keep position 0
    with pytest.raises(DecodeError, match="8 bits set, expected k=7"):
        codec.decode(bytes(wrong_count), 13)
    beyond = bytearray(payload)
    beyond[11] |= 0x80  # bit 15: n is 13
    with pytest.raises(DecodeError, match="bits set beyond length 13"):
        codec.decode(bytes(beyond), 13)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_value_in_payload_is_rejected(bad):
    payload = TopKCompression(0.5).encode(random_vector(20))
    corrupted = payload[:-4] + struct.pack("<f", bad)
    with pytest.raises(DecodeError, match="NaN or Inf"):
        TopKCompression().decode(corrupted, 20)


def test_random_corruption_raises_only_decode_error():
    rng = np.random.default_rng(7)
    for n, ratio in [(20, 0.5), (1000, 0.003), (9, 0.2), (3000, 0.05)]:
        codec = TopKCompression(ratio)
        payload = codec.encode(random_vector(n))
        for _ in range(2000):
            corrupted = bytearray(payload)
            for i in rng.integers(0, len(payload), size=rng.integers(1, 4)):
                corrupted[i] = rng.integers(0, 256)
            try:
                decoded = codec.decode(bytes(corrupted), n)
            except DecodeError:
                continue
            assert decoded.shape == (n,) and np.isfinite(decoded).all()


def test_codec_metadata():
    assert TopKCompression.name == "topk" and TopKCompression.biased is True


# --- options: sampled threshold, per-layer selection ---------------------------------------------

@pytest.mark.parametrize("n,ratio", [(5000, 0.5), (100_000, 0.01), (100_000, 0.001), (20_000, 0.9)])
def test_sampled_threshold_payload_is_identical_to_exact(n, ratio):
    vector = np.round(random_vector(n, seed=5), 2)  # many ties
    assert TopKCompression(ratio).encode(vector) == TopKCompression(ratio, threshold="exact").encode(vector)


def test_per_layer_selection_keeps_ceil_ratio_times_size_in_every_layer():
    rng = np.random.default_rng(0)
    layout = [10, 1000, 3, 5000]
    vector = np.concatenate([100 * rng.standard_normal(10), rng.standard_normal(1000),
                             0.001 * rng.standard_normal(3), rng.standard_normal(5000)]).astype(np.float32)
    codec = TopKCompression(0.1, layout=layout)
    positions, values = codec.decode_sparse(codec.encode(vector), vector.size)
    starts = np.cumsum([0] + layout)
    for i, size in enumerate(layout):
        in_layer = positions[(positions >= starts[i]) & (positions < starts[i + 1])] - starts[i]
        assert in_layer.tolist() == reference_positions(vector[starts[i]:starts[i + 1]], math.ceil(0.1 * size)).tolist()
    assert codec.k_for(vector.size) == 1 + 100 + 1 + 500 == positions.size
    global_codec = TopKCompression(0.1)  # global selection takes all 10 large entries and none of the tiny ones
    global_positions, _ = global_codec.decode_sparse(global_codec.encode(vector), vector.size)
    kept = set(global_positions.tolist())
    assert set(range(10)) <= kept and not set(range(1010, 1013)) & kept


def test_per_layer_payload_is_decoded_without_knowing_the_layout():
    vector = random_vector(300)
    payload = TopKCompression(0.2, layout=[100, 200], threshold="sampled").encode(vector)
    expected = TopKCompression(0.2, layout=[100, 200]).decode(payload, 300)
    assert np.array_equal(TopKCompression().decode(payload, 300), expected)


def test_layout_that_does_not_sum_to_the_length_is_refused():
    with pytest.raises(ValueError, match="layout sums to 30 but the vector has length 31"):
        TopKCompression(0.5, layout=[10, 20]).encode(random_vector(31))


@pytest.mark.parametrize("options,message", [
    ({"threshold": "approx"}, "threshold must be 'exact' or 'sampled'"),
    ({"layout": [3, 0]}, "layout sizes must be positive"),
    ({"layout": []}, "at least one layer"),
    ({"layout": "10"}, "sequence of layer sizes"),
    ({"seed": -1}, "seed"),
    ({"seed": None}, "seed"),
])
def test_bad_options_are_refused_at_construction(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        TopKCompression(0.5, **options)


def test_size_is_an_upper_bound_for_any_positions_and_encoded_size_is_exact():
    codec = TopKCompression(0.01)
    for seed in range(5):
        vector = random_vector(10_000, seed=seed)
        payload = codec.encode(vector)
        positions, _ = codec.decode_sparse(payload, 10_000)
        assert len(payload) == codec.encoded_size(positions, 10_000) <= codec.size(10_000)


def test_a_layout_keeps_and_sizes_ceil_ratio_times_size_per_layer_not_of_the_whole():
    """Per layer ceil(0.5 * 3) + ceil(0.5 * 3) = 4 entries, where the whole vector's ceil(0.5 * 6) is 3: k_for and
    size() count the layers' (a bound computed from the global k would be below the payload's length)."""
    vector = np.arange(1, 7, dtype=np.float32)
    codec = TopKCompression(0.5, layout=[3, 3])
    payload = codec.encode(vector)
    assert codec.k_for(6) == 4 == struct.unpack_from("<BBII", payload)[3]
    assert len(payload) <= codec.size(6)
    assert codec.decode(payload, 6).tolist() == [0.0, 2.0, 3.0, 0.0, 5.0, 6.0]


def test_decode_sparse_values_are_a_writable_native_copy():
    """The values sit read-only in the payload's bytes: a caller that scales them in place must get its own array."""
    payload = TopKCompression(0.5).encode(np.array([1.0, -3.0, 0.5, 2.0], np.float32))
    positions, values = TopKCompression().decode_sparse(payload, 4)
    assert positions.tolist() == [1, 3] and values.tolist() == [-3.0, 2.0]
    assert values.flags.writeable and values.dtype == np.float32 and values.dtype.isnative
    values *= 2  # in place, as aggregation does
    assert TopKCompression().decode_sparse(payload, 4)[1].tolist() == [-3.0, 2.0]


@pytest.mark.parametrize("n", [9, 13, 15])
def test_the_first_bitmap_bit_beyond_the_length_is_refused(n):
    """Bit n itself (the lowest padding bit of the last byte), not only the top bit, is refused."""
    payload = bytearray(TopKCompression(1.0).encode(np.ones(n, np.float32)))
    payload[10 + n // 8] |= 1 << (n % 8)
    payload[10 + n // 8 - 1] &= 0x7F  # keep k bits set: position 7 dropped for the bit beyond the end
    with pytest.raises(DecodeError, match=f"bits set beyond length {n}"):
        TopKCompression().decode(bytes(payload), n)
