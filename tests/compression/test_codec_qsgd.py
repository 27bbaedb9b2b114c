"""QSGDCompression: unbiased stochastic levels of the norm, bit-packed, within r/s of the input."""

import struct

import numpy as np
import pytest

import compression
from compression import DecodeError, QSGDCompression
from compression.packing import pack_codes


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def scale_of(vector):
    norm = np.sqrt(np.sum(np.asarray(vector, np.float64) ** 2))
    scale = np.float32(norm)
    return np.nextafter(scale, np.float32(np.inf)) if scale < norm else scale


@pytest.mark.parametrize("levels", [1, 2, 16, 127, 128, 1000, 32767])
def test_decoded_entries_are_adjacent_levels_of_the_norm_within_r_over_s(levels):
    vector = random_vector(3001)
    codec = QSGDCompression(levels=levels)
    decoded = compression.get("qsgd")().decode(codec.encode(vector), 3001)
    r = np.float64(scale_of(vector))
    exact = np.abs(vector) / r * levels
    level = np.round(np.abs(decoded) / r * levels)
    assert ((level == np.floor(exact)) | (level == np.floor(exact) + 1)).all()
    assert (np.abs(decoded - vector) <= r / levels * (1 + 1e-6)).all()
    assert (np.sign(decoded)[decoded != 0] == np.sign(vector)[decoded != 0]).all()


def test_size_is_15_plus_ceil_n_w_over_8_with_w_1_plus_bit_length_of_levels():
    for n, levels, width in [(1, 16, 6), (1000, 16, 6), (999, 15, 5), (10, 1, 2), (100, 127, 8), (100, 255, 9)]:
        codec = QSGDCompression(levels=levels)
        payload = codec.encode(random_vector(n))
        assert len(payload) == 15 + -(-n * width // 8) == codec.size(n)
    codec = QSGDCompression(layout=[3, 7])
    assert len(codec.encode(random_vector(10))) == 11 + 4 * 2 + 4 * 2 + -(-10 * 6 // 8) == codec.size(10)


def test_payload_layout_byte_for_byte():
    vector = np.array([3.0, -4.0, 0.0], dtype=np.float32)  # norm 5, levels 4: 2.4 and 3.2 of 4 steps
    payload = QSGDCompression(levels=4).encode(vector)
    version, n, levels, layers = struct.unpack_from("<BIHI", payload)
    assert (version, n, levels, layers) == (1, 3, 4, 0)
    assert struct.unpack_from("<f", payload, 11)[0] == 5.0
    codes = np.frombuffer(payload[15:], np.uint8)
    level = [(int.from_bytes(payload[15:], "little") >> (4 * i)) & 0b111 for i in range(3)]
    sign = [(int.from_bytes(payload[15:], "little") >> (4 * i + 3)) & 1 for i in range(3)]
    assert level[0] in (2, 3) and level[1] in (3, 4) and level[2] == 0 and sign == [0, 1, 0]
    assert codes.size == 2


def test_unbiased_on_average():
    vector = random_vector(40, seed=3)
    codec = QSGDCompression(levels=2, seed=None)
    mean = np.mean([codec.decode(codec.encode(vector), 40) for _ in range(5000)], axis=0)
    r = scale_of(vector)
    assert np.abs(mean - vector).max() <= 5 * (r / 2 / 2) / np.sqrt(5000)  # per-draw sd <= r/(2s)
    assert QSGDCompression.biased is False


def test_per_layer_norms():
    vector = np.concatenate([1000 * random_vector(50, 1), 0.001 * random_vector(50, 2)]).astype(np.float32)
    per_layer = QSGDCompression(levels=16, layout=[50, 50])
    decoded = per_layer.decode(per_layer.encode(vector), 100)
    assert np.abs(decoded[50:] - vector[50:]).max() <= scale_of(vector[50:]) / 16 * (1 + 1e-6)
    whole = QSGDCompression(levels=16)
    assert not whole.decode(whole.encode(vector), 100)[50:].any()  # one norm: the small layer rounds to 0


def test_zero_constant_huge_and_empty_inputs():
    codec = QSGDCompression()
    assert not codec.decode(codec.encode(np.zeros(100)), 100).any()
    constant = np.full(100, -2.0, np.float32)
    assert (np.abs(codec.decode(codec.encode(constant), 100) - constant) <= 20.0 / 16 * (1 + 1e-6)).all()
    huge = np.full(100, 3e38, np.float32)  # L2 norm 3e39: the scale is capped at float32's max
    decoded = codec.decode(codec.encode(huge), 100)
    assert np.isfinite(decoded).all() and (np.abs(decoded - huge) <= np.finfo(np.float32).max / 16).all()
    assert codec.decode(codec.encode(np.zeros(0)), 0).shape == (0,)


def test_reproducible_for_a_seed_and_input():
    vector = random_vector(500)
    assert QSGDCompression().encode(vector) == QSGDCompression().encode(vector)
    assert QSGDCompression(seed=1).encode(vector) != QSGDCompression(seed=2).encode(vector)


def payload_with(codes, levels=4, scale=5.0, n=None):
    n = len(codes) if n is None else n
    width = 1 + levels.bit_length()
    return struct.pack("<BIHI", 1, n, levels, 0) + struct.pack("<f", scale) + pack_codes(np.array(codes), width)


def test_decode_rejects_malformed_payloads():
    codec = QSGDCompression()
    assert codec.decode(payload_with([1, 2, 4 | 8]), 3).tolist() == [1.25, 2.5, -5.0]
    with pytest.raises(DecodeError, match="level 5 above the 4 levels"):
        codec.decode(payload_with([5, 0, 0]), 3)
    with pytest.raises(DecodeError, match="sign bit set on a zero level"):
        codec.decode(payload_with([8, 0, 0]), 3)
    with pytest.raises(DecodeError, match="padding bits"):
        codec.decode(payload_with([1, 1, 1])[:-1] + b"\xf0", 3)
    with pytest.raises(DecodeError, match="scales must be finite"):
        codec.decode(payload_with([1, 1, 1], scale=-1.0), 3)
    with pytest.raises(DecodeError, match="scales must be finite"):
        codec.decode(payload_with([1, 1, 1], scale=float("nan")), 3)
    with pytest.raises(DecodeError, match="levels 0 out of range"):
        codec.decode(struct.pack("<BIHI", 1, 3, 0, 0) + b"\x00" * 8, 3)
    payload = QSGDCompression(layout=[2, 8]).encode(random_vector(10))
    with pytest.raises(DecodeError, match="layout sums to 10, expected length 11"):
        codec.decode(payload[:1] + struct.pack("<I", 11) + payload[5:], 11)
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], 10)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(payload + b"\x00", 10)
    with pytest.raises(DecodeError, match="version 2"):
        codec.decode(b"\x02" + payload[1:], 10)


def test_a_tensor_whose_scale_is_0_must_have_every_level_0():
    """The encoder writes level 0 throughout a zero tensor; levels (and signs) on a zero scale are a non-canonical
    encoding, refused as int8 refuses a nonzero value on a zero scale (they decoded to 0 and -0.0)."""
    codec = QSGDCompression()
    assert codec.decode(QSGDCompression().encode(np.zeros(3, np.float32)), 3).tolist() == [0.0, 0.0, 0.0]
    for codes in ([1, 0, 0], [0, 4 | 8, 0]):
        with pytest.raises(DecodeError, match="nonzero level in a tensor whose scale is 0"):
            codec.decode(payload_with(codes, scale=0.0), 3)
    layered = QSGDCompression(layout=[2, 3])
    payload = bytearray(layered.encode(np.array([0, 0, 1, -2, 3], np.float32)))
    scales_at = 1 + 4 + 2 + 4 + 8  # header, L, two layer sizes
    assert struct.unpack_from("<f", payload, scales_at)[0] == 0.0  # the first layer is all zero
    codec.decode(bytes(payload), 5)
    payload[scales_at + 4:scales_at + 8] = struct.pack("<f", 0.0)  # the second layer's scale zeroed: its levels stay
    with pytest.raises(DecodeError, match="nonzero level in a tensor whose scale is 0"):
        codec.decode(bytes(payload), 5)


def test_bad_options_are_refused():
    for levels in (0, 32768, 2.5, True):
        with pytest.raises(ValueError, match="levels"):
            QSGDCompression(levels=levels)


def test_an_entry_holding_the_whole_norm_is_level_s_so_a_one_hot_vector_is_exact():
    """|v_i| = r gives level s (floor(s + u) = s): the top level is reachable, and a one-hot vector decodes exactly
    (a level capped below s would lose r / s of it on every encode, a bias error feedback cannot see)."""
    for levels in (1, 2, 16, 1000):
        vector = np.zeros(50, np.float32)
        vector[7] = -3.0
        decoded = QSGDCompression(levels=levels).decode(QSGDCompression(levels=levels).encode(vector), 50)
        assert decoded.tolist() == vector.tolist()


def test_each_layer_scale_is_its_norm_rounded_up_to_float32():
    """The per-layer scale r is the smallest float32 >= the layer's L2 norm (one below it would let a level
    exceed s, capped: biased)."""
    vector = np.concatenate([random_vector(40, 3), 7 * random_vector(25, 4), [1.0, 1.0]]).astype(np.float32)
    payload = QSGDCompression(levels=16, layout=[40, 25, 2]).encode(vector)
    scales = np.frombuffer(payload, "<f4", count=3, offset=7 + 4 + 12)
    assert scales.tolist() == [scale_of(vector[:40]), scale_of(vector[40:65]), scale_of(vector[65:])]


@pytest.mark.parametrize("levels", [3, 7, 100])
def test_a_decoded_entry_is_r_times_l_over_s_rounded_once_to_float32(levels):
    """r * l / s within half a float32 ulp (plus float64 rounding): a float32 r / s would add a rounding of its own,
    up to a whole ulp off."""
    from fractions import Fraction

    from compression.packing import unpack_codes
    from compression.qsgd import code_width

    x = random_vector(500, seed=levels)
    payload = QSGDCompression(levels=levels).encode(x)
    width = code_width(levels)
    codes = unpack_codes(np.frombuffer(payload, np.uint8, offset=15), x.size, width, "test")
    r = Fraction(float(np.frombuffer(payload, "<f4", count=1, offset=11)[0]))
    decoded = QSGDCompression().decode(payload, x.size)
    for code, d in zip(codes.tolist(), decoded):
        exact = r * (code & ((1 << (width - 1)) - 1)) / levels
        ulp = Fraction(float(np.spacing(np.float32(abs(d)))))
        assert abs(abs(Fraction(float(d))) - exact) <= ulp / 2 + exact * Fraction(1, 2**50)
