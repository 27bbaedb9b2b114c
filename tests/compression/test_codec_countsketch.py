"""CountSketchCompression and SketchAccumulator: linear tables, heavy hitters, error feedback in sketch space."""

import struct

import numpy as np
import pytest

from compression import CountSketchCompression, DecodeError, ErrorFeedback, SketchAccumulator


def planted(n, spikes, seed, noise=0.01, height=10.0):
    """Small Gaussian noise plus large spikes of random sign at `spikes`."""
    rng = np.random.default_rng(seed)
    vector = noise * rng.standard_normal(n)
    vector[spikes] += height * rng.choice([-1.0, 1.0], len(spikes))
    return vector.astype(np.float32)


def test_shape_k_and_size_follow_the_ratio():
    codec = CountSketchCompression(0.1, rows=3, cols_per_k=2)
    assert codec.shape_for(10_000) == (3, 333) and codec.k_for(10_000) == 166
    payload = codec.encode(np.ones(10_000, np.float32))
    assert len(payload) == 25 + 4 * 3 * 333 == codec.size(10_000)
    assert struct.unpack_from("<BIIIIQ", payload) == (1, 10_000, 3, 333, 166, 0)
    default = CountSketchCompression(0.1)
    assert default.shape_for(10_000) == (5, 200) and default.k_for(10_000) == 12
    tiny = CountSketchCompression(0.001, rows=5)
    assert tiny.shape_for(100) == (5, 1) and tiny.k_for(100) == 1


def test_payload_table_is_the_sketch_and_tables_are_linear():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 5000)).astype(np.float32)
    codec = CountSketchCompression(0.1, rows=3, seed=7)
    table_a = codec.table(codec.encode(a), 5000)
    assert np.array_equal(table_a, codec.hashes(5000).sketch(a))
    summed = codec.add_tables([codec.encode(a), codec.encode(b)], 5000)
    np.testing.assert_allclose(summed, codec.sketch_table(a + b), atol=1e-4)
    np.testing.assert_allclose(codec.sketch_table(2.5 * a), 2.5 * table_a, rtol=1e-5, atol=1e-5)


def test_heavy_hitters_of_a_sum_of_planted_vectors_are_recovered():
    n, clients = 20_000, 8
    rng = np.random.default_rng(1)
    shared = np.sort(rng.choice(n, 10, replace=False))  # every client has these spikes, same sign
    # 5 x 1000: an entry looks like a spike only if 3 of its 5 buckets hold one (about 0.2 such entries)
    codec = CountSketchCompression(0.25, rows=5)
    payloads = []
    for c in range(clients):
        vector = planted(n, [], seed=100 + c)
        vector[shared] += 5.0
        payloads.append(codec.encode(vector))
    total = codec.add_tables(payloads, n)
    recovered = codec.unsketch(total, n, k=10)
    assert np.flatnonzero(recovered).tolist() == shared.tolist()
    np.testing.assert_allclose(recovered[shared], 40.0, atol=1.0)
    single = codec.decode(payloads[0], n)  # one client's own payload decodes to its heavy hitters
    assert set(shared.tolist()) <= set(np.flatnonzero(single).tolist())


def test_decode_uses_the_header_not_the_receivers_options():
    vector = planted(3000, [5, 77, 2999], seed=2)
    payload = CountSketchCompression(0.2, rows=3, cols_per_k=50.0, seed=11).encode(vector)
    decoded = CountSketchCompression().decode(payload, 3000)
    assert np.count_nonzero(decoded) == 4 and {5, 77, 2999} <= set(np.flatnonzero(decoded).tolist())


def test_accumulator_residual_table_is_the_sketch_of_what_was_not_extracted():
    n = 5000
    codec = CountSketchCompression(0.1, rows=3, seed=3)
    accumulator = SketchAccumulator(codec, n)
    added = np.zeros(n, np.float64)
    extracted = np.zeros(n, np.float64)
    for round in range(5):
        for c in range(3):
            vector = planted(n, [10 * round, 4000 + c], seed=10 * round + c, noise=0.1)
            accumulator.add(codec.table(codec.encode(vector), n))
            added += vector
        positions, values = accumulator.extract(25)
        assert positions.size == 25 and values.dtype == np.float32
        extracted[positions] += values
        remainder = (added - extracted).astype(np.float32)
        np.testing.assert_allclose(accumulator.table, codec.sketch_table(remainder), atol=2e-3)
    # what the server extracted over the rounds finds every planted spike
    assert {0, 10, 20, 30, 40, 4000, 4001, 4002} <= set(np.flatnonzero(extracted).tolist())


FLOAT32_MAX = float(np.finfo(np.float32).max)


def error_feedback_growth(codec, server_side, rounds=100, n=20_000):
    """Residual norm after `rounds` rounds of heavy-tailed updates, relative to one update's norm.

    A diverging residual is stopped, and its float64 norm returned, just before the codec would have to refuse
    it for leaving float32: server side when a cell of the accumulated table no longer fits float32 (extract
    reads the table as float32); client side when the corrected update's L1 norm, which bounds every cell of
    its sketch, passes half of float32's range. Every other ValueError from the codec fails the test.
    """
    rng = np.random.default_rng(0)
    accumulator, residual = SketchAccumulator(codec, n), np.zeros(n, np.float32)
    added, extracted = np.zeros(n), np.zeros(n)
    for _ in range(rounds):
        update = rng.standard_t(2, n).astype(np.float32)
        if server_side:
            accumulator.add(codec.sketch_table(update))
            added += update
            if not np.isfinite(accumulator.table.astype(np.float32)).all():
                break
            positions, values = accumulator.extract()
            extracted[positions] += values
        else:
            if not np.abs(update.astype(np.float64) + residual).sum() <= FLOAT32_MAX / 2:
                break
            _, residual = ErrorFeedback(codec).encode(update, residual)
    remainder = added - extracted if server_side else residual.astype(np.float64)
    return np.linalg.norm(remainder) / np.linalg.norm(update)


@pytest.mark.parametrize("server_side", [True, False])
def test_default_shape_keeps_error_feedback_from_exploding_where_one_row_diverges(server_side):
    """Not bounded: the residual grows like a random walk (experiments.sketch_feedback); one row explodes."""
    for ratio in (0.1, 0.01):
        assert error_feedback_growth(CountSketchCompression(ratio), server_side) < 50
    with np.errstate(over="ignore"):
        assert error_feedback_growth(CountSketchCompression(0.1, rows=1, cols_per_k=2), server_side, rounds=40) > 1e6


def test_accumulator_refuses_wrong_tables():
    accumulator = SketchAccumulator(CountSketchCompression(0.1), 100)
    with pytest.raises(ValueError, match="shape"):
        accumulator.add(np.zeros((2, 10)))
    with pytest.raises(ValueError, match="NaN or Inf"):
        accumulator.add(np.full((5, 2), np.nan))


def test_overflowing_table_is_a_clear_error():
    with pytest.raises(ValueError, match="overflows float32"):
        CountSketchCompression(0.01).encode(np.full(1000, 3e38, np.float32))


def test_add_tables_refuses_payloads_of_different_sketches():
    a = CountSketchCompression(0.1, seed=1).encode(np.ones(100))
    b = CountSketchCompression(0.1, seed=2).encode(np.ones(100))
    with pytest.raises(DecodeError, match="disagree"):
        CountSketchCompression(0.1).add_tables([a, b], 100)


def test_decode_rejects_malformed_payloads():
    codec = CountSketchCompression(0.1)
    payload = codec.encode(np.arange(100, dtype=np.float32))
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], 100)
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(payload + b"\x00", 100)
    header = struct.unpack_from("<BIIIIQ", payload)
    for index, value, message in [(0, 2, "version 2"), (2, 0, "rows=0"), (2, 65, "rows=65"), (3, 0, "cols=0"),
                                  (3, 101, "cols=101"), (4, 0, "k=0"), (4, 101, "k=101"), (1, 99, "length 99")]:
        bad = list(header)
        bad[index] = value
        with pytest.raises(DecodeError, match=message):
            codec.decode(struct.pack("<BIIIIQ", *bad) + payload[25:], 100)
    with pytest.raises(DecodeError, match="NaN or Inf"):
        codec.decode(payload[:-4] + struct.pack("<f", np.nan), 100)


def test_bad_options_are_refused():
    for options in ({"rows": 0}, {"rows": 65}, {"cols_per_k": 0}, {"cols_per_k": float("inf")},
                    {"cols_per_k": float("nan")}, {"cols_per_k": True}, {"seed": None}, {"seed": -3}):
        with pytest.raises(ValueError):
            CountSketchCompression(0.1, **options)
    assert CountSketchCompression(0.1, cols_per_k=np.float32(2.0)).k_for(1000) == 10  # a numpy float is a number


def test_columns_read_the_ratio_as_the_decimal_it_prints_as():
    """0.29 * 100 is 28.999999999999996 in binary floating point: the table has the 29 columns 0.29 means."""
    assert CountSketchCompression(0.29, rows=1).shape_for(100) == (1, 29)
    assert CountSketchCompression(0.07, rows=1).shape_for(100) == (1, 7)
    decimal = CountSketchCompression(0.33, rows=1, cols_per_k=1.1)  # k = floor(33 / 1.1) = 30, not 29.999...'s 29
    assert decimal.shape_for(100) == (1, 33) and decimal.k_for(100) == 30


def test_the_accumulated_table_is_float64_so_a_small_addition_to_a_large_sum_is_kept():
    codec = CountSketchCompression(0.5, rows=1, cols_per_k=1)
    accumulator = SketchAccumulator(codec, 8)
    accumulator.add(np.full((1, 4), 2.0 ** 25, np.float32))
    accumulator.add(np.ones((1, 4), np.float32))  # 2**25 + 1 is not a float32
    assert accumulator.table.tolist() == [[2.0 ** 25 + 1] * 4]


def test_add_tables_refuses_a_sum_that_overflows_float32():
    """Each table is finite (3e38 in its cells); their float64 sum is not a float32: an error, not Inf."""
    codec = CountSketchCompression(0.1)
    x = np.zeros(1000, np.float32)
    x[7] = 3e38
    payload = codec.encode(x)
    assert np.abs(codec.table(payload, x.size)).max() == np.float32(3e38)
    with pytest.raises(ValueError, match="summed table overflows float32"):
        codec.add_tables([payload, payload], x.size)


def test_check_sender_refuses_a_sketch_that_decodes_another_k():
    """Same rows, columns and seed but another cols_per_k: its payload names another k, refused by the server."""
    ours, theirs = CountSketchCompression(0.5), CountSketchCompression(0.5, cols_per_k=8.0)
    assert ours.shape_for(1000) == theirs.shape_for(1000) and ours.k_for(1000) != theirs.k_for(1000)
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    ours.check_sender(ours.encode(x), x.size)
    with pytest.raises(DecodeError, match="another sketch"):
        ours.check_sender(theirs.encode(x), x.size)


def test_accumulator_refuses_a_table_that_would_broadcast():
    """A single row (or a flat row of cols cells) broadcasts over every row: refused, not added rows times."""
    accumulator = SketchAccumulator(CountSketchCompression(0.1), 100)
    rows, cols = accumulator.table.shape
    for wrong in (np.ones((1, cols)), np.ones(cols)):
        with pytest.raises(ValueError, match="expected a sketch table of shape"):
            accumulator.add(wrong)
    assert not accumulator.table.any()


def test_a_payloads_table_is_a_writable_copy():
    codec = CountSketchCompression(0.1)
    payload = codec.encode(np.linspace(-1, 1, 100).astype(np.float32))
    table = codec.table(payload, 100)
    assert table.flags.writeable and table.dtype == np.float32 and table.dtype.isnative
