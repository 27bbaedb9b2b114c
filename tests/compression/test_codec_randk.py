"""RandKCompression: random positions from a seed in the payload, values exact, optional n/k scaling."""

import struct
import warnings

import numpy as np
import pytest

import compression
from compression import DecodeError, RandKCompression
from compression.randk import randk_positions


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("n,ratio", [(1, 1.0), (10, 0.5), (1000, 0.01), (10_000, 0.5), (10_000, 0.001), (777, 0.9)])
def test_decoder_regenerates_the_positions_and_values_are_bitwise_exact(n, ratio):
    vector = random_vector(n)
    codec = RandKCompression(ratio)
    payload = codec.encode(vector)
    k = codec.k_for(n)
    positions, values = compression.get("randk")().decode_sparse(payload, n)
    seed = struct.unpack_from("<Q", payload, 10)[0]
    assert positions.tolist() == randk_positions(n, k, seed).tolist()
    assert np.array_equal(values.view(np.uint32), vector[positions].view(np.uint32))
    decoded = codec.decode(payload, n)
    assert np.array_equal(decoded[positions], vector[positions])
    assert not np.delete(decoded, positions).any()


def test_payload_layout_and_size_are_18_plus_4k():
    vector = random_vector(100)
    payload = RandKCompression(0.07).encode(vector)
    version, flags, n, k, seed = struct.unpack_from("<BBIIQ", payload)
    assert (version, flags, n, k) == (1, 0, 100, 7)
    assert len(payload) == 18 + 4 * 7 == RandKCompression(0.07).size(100)
    assert payload[18:] == vector[randk_positions(100, 7, seed)].astype("<f4").tobytes()


@pytest.mark.parametrize("n,k", [(1000, 10), (1000, 500), (64, 1), (65, 2), (5, 5)])
def test_randk_positions_are_k_distinct_sorted_and_each_equally_likely(n, k):
    counts = np.zeros(n)
    trials = 3000
    for seed in range(trials):
        positions = randk_positions(n, k, seed)
        assert positions.size == k and (np.diff(positions) > 0).all() and 0 <= positions[0] and positions[-1] < n
        counts[positions] += 1
    expected = trials * k / n
    # inclusion counts are Binomial(trials, k/n): 5 standard deviations
    assert np.abs(counts - expected).max() <= 5 * np.sqrt(expected * (1 - k / n)) + 1e-9


def test_unbiased_option_scales_by_n_over_k_and_is_unbiased_on_average():
    vector = random_vector(50)
    codec = RandKCompression(0.1, unbiased=True, seed=None)
    assert codec.biased is False and RandKCompression(0.1).biased is True
    payload = codec.encode(vector)
    assert payload[1] == 1
    positions, values = codec.decode_sparse(payload, 50)
    np.testing.assert_allclose(values, vector[positions] * 10, rtol=1e-6)
    mean = np.mean([codec.decode(codec.encode(vector), 50) for _ in range(4000)], axis=0)
    # each entry is 10 x v with probability 1/10: standard deviation of the mean 3|v| / sqrt(4000)
    assert (np.abs(mean - vector) <= 5 * 3 * np.abs(vector) / np.sqrt(4000) + 1e-6).all()


def test_payload_seed_is_reproducible_per_input_and_differs_between_inputs():
    a, b = random_vector(1000, 1), random_vector(1000, 2)
    assert RandKCompression(0.1).encode(a) == RandKCompression(0.1).encode(a)
    assert RandKCompression(0.1).encode(a)[10:18] != RandKCompression(0.1).encode(b)[10:18]
    assert RandKCompression(0.1, seed=1).encode(a)[10:18] != RandKCompression(0.1, seed=0).encode(a)[10:18]
    assert RandKCompression(0.1, seed=None).encode(a)[10:18] != RandKCompression(0.1, seed=None).encode(a)[10:18]


def test_encode_refuses_empty_nan_and_unbiased_overflow():
    with pytest.raises(ValueError, match="empty"):
        RandKCompression().encode(np.zeros(0))
    with pytest.raises(ValueError, match="NaN or Inf"):
        RandKCompression().encode(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="overflow float32"):
        RandKCompression(0.5, unbiased=True).encode(np.full(10, 3e38, np.float32))
    huge = np.full(10, 3e38, np.float32)
    assert RandKCompression(0.5).decode(RandKCompression(0.5).encode(huge), 10).max() == np.float32(3e38)


def test_decode_rejects_malformed_payloads():
    codec = RandKCompression(0.5)
    payload = codec.encode(random_vector(20))
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], 20)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(payload + b"\x00", 20)
    with pytest.raises(DecodeError, match="version 9"):
        codec.decode(b"\x09" + payload[1:], 20)
    with pytest.raises(DecodeError, match="unknown bits"):
        codec.decode(payload[:1] + b"\x02" + payload[2:], 20)
    with pytest.raises(DecodeError, match="for length 20, but length 21"):
        codec.decode(payload, 21)
    with pytest.raises(DecodeError, match="k=0 out of range"):
        codec.decode(payload[:6] + struct.pack("<I", 0) + payload[10:18], 20)
    with pytest.raises(DecodeError, match="NaN or Inf"):
        codec.decode(payload[:-4] + struct.pack("<f", np.inf), 20)
    huge = struct.pack("<BBIIQ", 1, 1, 20, 2, 5) + struct.pack("<2f", 3e38, 1.0)  # unbiased: 10 x 3e38
    with pytest.raises(DecodeError, match="after scaling"):
        codec.decode(huge, 20)


@pytest.mark.parametrize("bits", [0x7F800001, 0xFF977A51, 0x7FC00000])  # signalling NaNs (either sign), a quiet one
def test_a_nan_in_an_unbiased_payload_is_refused_without_a_numpy_warning(bits):
    """Scaling by n/k goes through float64, and casting a signalling NaN there raises numpy's 'invalid value'
    warning: a hostile payload must get only the DecodeError."""
    payload = struct.pack("<BBIIQ", 1, 1, 20, 2, 5) + struct.pack("<I", bits) + struct.pack("<f", 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DecodeError, match="NaN or Inf"):
            RandKCompression().decode(payload, 20)


def test_bad_options_are_refused():
    with pytest.raises(TypeError):
        RandKCompression(0.5, unbiased="yes")
    with pytest.raises(ValueError, match="seed"):
        RandKCompression(0.5, seed=-1)


def test_unbiased_scaling_rounds_v_times_n_over_k_once_to_float32():
    """Each decoded value is v * n / k within half a float32 ulp (plus float64 rounding): scaling in float32 would
    round n / k first and then the product, up to a whole ulp off."""
    from fractions import Fraction

    n, k = 1000, 300
    codec = RandKCompression(k / n, unbiased=True)
    payload = codec.encode(random_vector(n, seed=4))
    sent = np.frombuffer(payload, "<f4", offset=18)
    assert sent.size == k
    _, decoded = RandKCompression().decode_sparse(payload, n)
    for v, d in zip(sent, decoded):
        exact = Fraction(float(v)) * n / k
        ulp = Fraction(float(np.spacing(np.float32(abs(d)))))
        assert abs(Fraction(float(d)) - exact) <= ulp / 2 + abs(exact) * Fraction(1, 2**50)


@pytest.mark.parametrize("unbiased", [False, True])
def test_decode_sparse_values_are_a_writable_native_copy(unbiased):
    """The values sit read-only in the payload's bytes: a caller that scales them in place must get its own array."""
    payload = RandKCompression(0.5, unbiased=unbiased).encode(random_vector(10))
    values = RandKCompression().decode_sparse(payload, 10)[1]
    assert values.flags.writeable and values.dtype == np.float32 and values.dtype.isnative
