"""RotationCodec: a public random Hadamard rotation, then unbiased stochastic rounding to 2L + 1 levels."""

import math
import struct
import time

import numpy as np
import pytest
import scipy.linalg

import compression
from compression import DecodeError
from compression.packing import pack_codes
from compression.rotation import RandomRotation, RotationCodec, fwht, padded_length

HEADER = struct.Struct("<BIBQf")  # version, n, bits, seed, scale


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def fields(payload):
    return HEADER.unpack_from(payload)


def payload_with(codes, bits=3, n=None, scale=2.0, seed=0, version=1):
    n = len(codes) if n is None else n
    return HEADER.pack(version, n, bits, seed, scale) + pack_codes(np.array(codes), bits)


# --- the rotation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 4, 8, 16, 128, 1024])
def test_fwht_is_the_sylvester_hadamard_matrix(d):
    x = np.random.default_rng(d).standard_normal(d)
    np.testing.assert_allclose(fwht(x) / np.sqrt(d), scipy.linalg.hadamard(d) / np.sqrt(d) @ x, atol=1e-12)


@pytest.mark.parametrize("n", [1, 3, 5, 100])
def test_rotation_is_hadamard_times_the_public_signs_of_the_padded_vector(n):
    """The protocol every client and the server must agree on, spelled out with scipy's matrix."""
    d = padded_length(n)
    x = np.random.default_rng(n).standard_normal(n)
    signs = 1.0 - 2.0 * np.random.default_rng(42).integers(0, 2, d)
    padded = np.zeros(d)
    padded[:n] = x
    expected = scipy.linalg.hadamard(d) @ (signs * padded) / np.sqrt(d)
    np.testing.assert_allclose(RandomRotation(n, 42).rotate(x), expected, atol=1e-12)


@pytest.mark.parametrize("n, d", [(1, 1), (2, 2), (3, 4), (1000, 1024), (4096, 4096), (4097, 8192)])
def test_rotation_preserves_the_norm_and_unrotate_inverts_it(n, d):
    rotation = RandomRotation(n, 7)
    x = random_vector(n, n).astype(np.float64)
    y = rotation.rotate(x)
    assert rotation.padded == d and y.shape == (d,) and y.dtype == np.float64
    assert math.isclose(np.linalg.norm(y), np.linalg.norm(x), rel_tol=1e-12)
    back = rotation.unrotate(y)
    assert back.shape == (n,) and back.dtype == np.float64
    np.testing.assert_allclose(back, x, atol=1e-6)


def test_rotation_spreads_a_spike_evenly_and_depends_on_the_seed():
    x = np.zeros(1000)
    x[3] = 1.0
    y = RandomRotation(1000, 0).rotate(x)
    np.testing.assert_allclose(np.abs(y), 1 / np.sqrt(1024))
    assert not np.array_equal(y, RandomRotation(1000, 1).rotate(x))
    assert np.array_equal(y, RandomRotation(1000, 0).rotate(x))  # public: same seed, same rotation


def test_rotation_of_a_501270_parameter_model_is_fast():
    rotation = RandomRotation(501_270, 0)
    assert rotation.padded == 2**19
    x = random_vector(501_270)
    start = time.perf_counter()
    back = rotation.unrotate(rotation.rotate(x))
    assert time.perf_counter() - start < 3.0  # vectorized: about 0.1 s here; a per-element loop takes minutes
    np.testing.assert_allclose(back, x, atol=1e-5)


def test_rotation_refuses_a_vector_of_the_wrong_length():
    with pytest.raises(ValueError, match="length 10"):
        RandomRotation(10, 0).rotate(np.zeros(9))
    with pytest.raises(ValueError, match="length 16"):
        RandomRotation(10, 0).unrotate(np.zeros(10))


# --- the masked path: table / from_table ------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 1000, 4096])
def test_tables_are_linear_and_from_table_inverts_them(n):
    codec = RotationCodec(seed=3)
    a, b = random_vector(n, 1), random_vector(n, 2)
    ta, tb = codec.table(a), codec.table(b)
    assert ta.dtype == np.float32 and ta.shape == (codec.table_size(n),) == (padded_length(n),)
    np.testing.assert_allclose(ta + tb, codec.table(a + b), atol=1e-5)
    np.testing.assert_allclose(codec.from_table(ta, n), a, atol=1e-5)
    mean = codec.from_table((ta.astype(np.float64) + tb) / 2, n)  # what a server unrotates: an averaged table
    assert mean.dtype == np.float32 and mean.shape == (n,)
    np.testing.assert_allclose(mean, (a.astype(np.float64) + b) / 2, atol=1e-5)


def test_table_refuses_nan_and_overflow_and_from_table_refuses_nan():
    codec = RotationCodec()
    with pytest.raises(ValueError, match="NaN or Inf"):
        codec.table(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="overflows float32"):
        codec.table(RandomRotation(4, 0).unrotate(np.array([4e38, 0, 0, 0])))  # entries of 2e38, one cell of 4e38
    with pytest.raises(ValueError, match="NaN or Inf"):
        codec.from_table(np.array([np.nan, 0.0]), 2)
    assert codec.table(np.zeros(0)).shape == (0,) and codec.from_table(np.zeros(0), 0).shape == (0,)


# --- the payload ------------------------------------------------------------------------------------

def test_payload_layout_byte_for_byte():
    x = random_vector(100, 5)
    codec = RotationCodec(bits=5, seed=9)
    payload = codec.encode(x)
    version, n, bits, seed, scale = fields(payload)
    assert (version, n, bits, seed) == (1, 100, 5, 9) and HEADER.size == 18
    y = RandomRotation(100, 9).rotate(x)
    top = np.abs(y).max()
    assert np.nextafter(np.float32(scale), np.float32(0)) < top <= scale  # max |y| rounded up to float32
    levels = 15
    stream = int.from_bytes(payload[18:], "little")
    codes = np.array([(stream >> (5 * i)) & 31 for i in range(128)])
    exact = y / scale * levels
    assert ((codes - levels == np.floor(exact)) | (codes - levels == np.ceil(exact))).all()  # adjacent levels
    decoded = compression.get("rotation")().decode(payload, 100)  # the receiver reads bits and seed from the payload
    expected = RandomRotation(100, 9).unrotate((codes - levels) * (scale / levels))
    np.testing.assert_allclose(decoded, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bits", [2, 3, 7, 8, 9, 16])
def test_size_is_18_plus_ceil_d_bits_over_8(bits):
    codec = RotationCodec(bits=bits)
    for n in (0, 1, 2, 3, 5, 100, 1000, 1025, 4096):
        d = padded_length(n)
        assert len(codec.encode(random_vector(n))) == 18 + -(-d * bits // 8) == codec.size(n), (n, bits)


def test_eight_bits_keep_the_relative_error_below_two_and_a_half_percent():
    for n in (1000, 10_000, 100_000):
        x = random_vector(n, n)
        decoded = RotationCodec(bits=8).decode(RotationCodec(bits=8).encode(x), n)
        assert decoded.dtype == np.float32 and decoded.shape == (n,)
        assert np.linalg.norm(decoded - x) / np.linalg.norm(x) < 0.025  # about 0.015 measured


def test_a_spike_does_not_flatten_the_rest_as_a_per_vector_int8_scale_does():
    x = random_vector(4096, 1)
    x[17] = 1000.0  # int8's scale is 1000 / 127: every other entry rounds to 0
    relative = lambda d: np.linalg.norm(d - x) / np.linalg.norm(x)
    rotated = RotationCodec(bits=8).decode(RotationCodec(bits=8).encode(x), 4096)
    int8 = compression.get("int8")().decode(compression.get("int8")().encode(x), 4096)
    assert relative(rotated) < 0.02 \
        and np.abs(np.delete(rotated - x, 17)).mean() < np.abs(np.delete(int8 - x, 17)).mean()


@pytest.mark.parametrize("bits", [2, 4])
def test_unbiased_over_the_rounding_and_deterministic_rounding_would_fail_the_same_bar(bits):
    """400 encodes of x plus distinct 1e-6 perturbations (so each draws its own rounding noise, with the
    same rotation): their mean decode is within 5 standard deviations of the mean input. Each rotated
    error is below s / L with variance <= (s / L)^2 / 4, and the orthonormal rotation keeps that per entry."""
    n, draws, levels = 50, 400, 2 ** (bits - 1) - 1
    x = random_vector(n, 3).astype(np.float64)
    rng = np.random.default_rng(11)
    inputs = [(x + 1e-6 * rng.standard_normal(n)).astype(np.float32) for _ in range(draws)]
    codec = RotationCodec(bits=bits)
    payloads = [codec.encode(v) for v in inputs]
    assert len(set(payloads)) > draws // 2  # the rounding really differs between encodes
    mean = np.mean([codec.decode(p, n).astype(np.float64) for p in payloads], axis=0)
    scale = max(fields(p)[4] for p in payloads)
    tolerance = 5 * scale / levels / 2 / np.sqrt(draws)
    assert np.abs(mean - np.mean(inputs, axis=0)).max() <= tolerance
    rotation = RandomRotation(n, 0)  # the same quantizer with round-to-nearest misses that bar by far
    nearest = rotation.unrotate(np.round(rotation.rotate(x) / scale * levels) * scale / levels)
    assert np.abs(nearest - x).max() > 2 * tolerance
    assert RotationCodec.biased is False


def test_reproducible_for_an_input_and_different_for_another_input_or_seed():
    x = random_vector(500)
    assert RotationCodec().encode(x) == RotationCodec().encode(x)
    assert RotationCodec(seed=1).encode(x)[18:] != RotationCodec(seed=2).encode(x)[18:]
    y = x.copy()
    y[0] = np.nextafter(y[0], np.float32(np.inf))
    assert RotationCodec().encode(x)[18:] != RotationCodec().encode(y)[18:]  # new input, new rounding noise


def test_zero_huge_tiny_and_empty_inputs():
    codec = RotationCodec()
    zero = codec.encode(np.zeros(100))
    assert fields(zero)[4] == 0.0 and not codec.decode(zero, 100).any()
    huge = np.full(100, 3e38, np.float32)  # rotated entries beyond float32: the scale is capped, decode saturates
    decoded = codec.decode(codec.encode(huge), 100)
    assert np.isfinite(decoded).all() and (decoded > 0).all()
    tiny = random_vector(1000) * np.float32(1e-30)
    error = codec.decode(codec.encode(tiny), 1000).astype(np.float64) - tiny
    assert np.linalg.norm(error) / np.linalg.norm(tiny.astype(np.float64)) < 0.025
    empty = codec.encode(np.zeros(0, np.float32))
    assert len(empty) == 18 == codec.size(0) and fields(empty)[1] == 0
    decoded = codec.decode(empty, 0)
    assert decoded.shape == (0,) and decoded.dtype == np.float32


def test_nan_and_inf_inputs_are_refused():
    for bad in (np.nan, np.inf, 1e39):
        with pytest.raises(ValueError, match="NaN or Inf"):
            RotationCodec().encode(np.array([1.0, bad, 2.0]))


@pytest.mark.parametrize("option", [{"bits": 1}, {"bits": 17}, {"bits": 3.5}, {"bits": True}, {"bits": "8"},
                                    {"seed": -1}, {"seed": None}, {"seed": 2**64}, {"seed": 1.5}])
def test_bad_options_are_refused(option):
    with pytest.raises(ValueError, match=next(iter(option))):
        RotationCodec(**option)


def test_decode_accepts_a_hand_built_payload_and_rejects_malformed_ones():
    codec = RotationCodec()
    # n = 1, d = 1, bits 3 (L = 3): code 5 is level +2 of 3, times the scale 3 -> 2.0, rotated by sign s_0
    sign = RandomRotation(1, 0).signs[0]
    assert codec.decode(payload_with([5], scale=3.0, n=1), 1).tolist() == [2.0 * sign]
    good = codec.encode(random_vector(10))
    for cut in range(len(good)):
        with pytest.raises(DecodeError, match="truncated"):
            codec.decode(good[:cut], 10)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(good + b"\x00", 10)
    with pytest.raises(DecodeError, match="version 2"):
        codec.decode(b"\x02" + good[1:], 10)
    with pytest.raises(DecodeError, match="for length 10, but length 11"):
        codec.decode(good, 11)
    with pytest.raises(DecodeError, match="scale must be finite"):
        codec.decode(good[:14] + struct.pack("<f", float("nan")) + good[18:], 10)
    with pytest.raises(DecodeError, match="scale must be finite"):
        codec.decode(good[:14] + struct.pack("<f", float("inf")) + good[18:], 10)
    with pytest.raises(DecodeError, match="scale must be finite and >= 0"):
        codec.decode(good[:14] + struct.pack("<f", -1.0) + good[18:], 10)
    with pytest.raises(DecodeError, match="scale must be finite and >= 0"):
        codec.decode(good[:14] + struct.pack("<f", -0.0) + good[18:], 10)
    with pytest.raises(DecodeError, match="code 7 above 2L = 6"):
        codec.decode(payload_with([1, 7, 3, 3]), 4)
    with pytest.raises(DecodeError, match="padding bits"):
        codec.decode(payload_with([3])[:-1] + b"\x83", 1)  # 3 bits used, bit 7 set
    for bits in (0, 1, 17, 255):
        with pytest.raises(DecodeError, match=f"bits {bits} out of range"):
            codec.decode(good[:5] + bytes([bits]) + good[6:], 10)
    with pytest.raises(DecodeError, match="must all be L"):
        codec.decode(payload_with([3, 4, 3, 3], scale=0.0), 4)
    with pytest.raises(DecodeError):
        codec.decode(b"", 0)


def test_registered_flags_and_the_receiver_builds_it_from_the_name():
    assert compression.get("rotation") is RotationCodec
    codec = compression.get("rotation")(0.1)
    assert codec.linear is True and codec.biased is False and RotationCodec.uses_ratio is False
    assert (codec.bits, codec.seed, codec.ratio) == (8, 0, 0.1)
    x = random_vector(300)
    payload = RotationCodec(bits=4, seed=12345).encode(x)
    decoded = compression.get("rotation")().decode(payload, 300)  # default options, the sender's from the payload
    np.testing.assert_array_equal(decoded, RotationCodec(bits=4, seed=12345).decode(payload, 300))
    assert np.linalg.norm(decoded - x) / np.linalg.norm(x) < 0.4


def test_check_sender_refuses_a_payload_of_another_seed_or_width():
    x = np.linspace(-1, 1, 40).astype(np.float32)
    RotationCodec(bits=8, seed=3).check_sender(RotationCodec(bits=8, seed=3).encode(x), x.size)
    for other in (RotationCodec(bits=8, seed=4), RotationCodec(bits=6, seed=3)):
        with pytest.raises(DecodeError, match="another rotation"):
            RotationCodec(bits=8, seed=3).check_sender(other.encode(x), x.size)


def test_from_table_refuses_a_finite_table_whose_unrotation_overflows_float32():
    """Two cells of 3e38 unrotate to 3e38 * sqrt(2) (one of the two entries), beyond float32: an error, not Inf."""
    with pytest.raises(ValueError, match="unrotated table overflows float32"):
        RotationCodec().from_table(np.array([3e38, 3e38]), 2)


def test_a_zero_scale_refuses_codes_below_l_as_well_as_above():
    with pytest.raises(DecodeError, match="must all be L"):
        RotationCodec().decode(payload_with([3, 2, 3, 3], scale=0.0), 4)
