"""FixedPointQuantizer: real vectors into Z_{2^b} and back, without overflow and without bias."""

import numpy as np
import pytest

from secagg import FixedPointQuantizer, smallest_safe_bits


@pytest.mark.parametrize("quant_bits", [2, 8, 16, 24])
@pytest.mark.parametrize("clients", [1, 2, 3, 10, 100, 1000])
def test_the_smallest_safe_field_holds_the_extreme_sum_and_one_bit_less_would_wrap(quant_bits, clients):
    b = smallest_safe_bits(quant_bits, clients)
    extreme = clients * (2 ** (quant_bits - 1) - 1)
    assert extreme <= 2 ** (b - 1) - 1 and (b == quant_bits or extreme > 2 ** (b - 2) - 1)
    assert b <= quant_bits + int(np.ceil(np.log2(clients)))


@pytest.mark.parametrize("quant_bits,clients,match", [(1, 10, "quant_bits"), (0, 10, "quant_bits"),
                                                      (8.5, 10, "quant_bits"), (8, 0, "max_clients"),
                                                      (8, -5, "max_clients")])
def test_the_smallest_safe_field_of_an_impossible_width_or_cohort_is_refused_not_computed(quant_bits, clients, match):
    with pytest.raises(ValueError, match=match):
        smallest_safe_bits(quant_bits, clients)


@pytest.mark.parametrize("bits,quant_bits,clients", [(20, 16, 10), (12, 8, 10), (9, 8, 2), (30, 20, 1000),
                                                     (32, 16, 10), (18, 16, 3)])
@pytest.mark.parametrize("sign", [1.0, -1.0, 0.0])
def test_in_a_narrow_field_the_sum_read_mod_2_to_the_b_is_exact(bits, quant_bits, clients, sign):
    """Clients' values (random, and all at the clip bound) summed mod 2^32, then read mod 2^b: the exact
    signed sum of the quantized integers, whatever the representative's high bits."""
    q = FixedPointQuantizer(clip=0.5, max_clients=clients, bits=bits, quant_bits=quant_bits)
    assert q.bound == 2 ** (quant_bits - 1) - 1
    rng = np.random.default_rng(bits * clients)
    total, exact = np.zeros(64, np.uint32), np.zeros(64, np.int64)
    for _ in range(clients):
        x = np.full(64, sign * 0.5) if sign else rng.uniform(-0.7, 0.7, 64)
        v = q.quantize(x, rng)
        low = v & np.uint32((1 << bits) - 1) if bits < 32 else v  # what the wire carries
        total += low + (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) << np.uint32(bits)
                        if bits < 32 else 0)  # high bits are noise: only the residue mod 2^b is defined
        exact += v.view(np.int32)
    np.testing.assert_array_equal(np.round(q.dequantize(total) * q.scale).astype(np.int64), exact)


def test_a_field_too_narrow_for_the_cohort_is_refused_with_the_smallest_safe_width():
    with pytest.raises(ValueError, match="needs at least 20 bits"):
        FixedPointQuantizer(clip=1.0, max_clients=10, bits=19, quant_bits=16)
    for bad in (1, 33, 20.5):
        with pytest.raises(ValueError, match="field bits"):
            FixedPointQuantizer(clip=1.0, max_clients=10, bits=bad)


def test_levels_follow_max_clients_so_the_signed_sum_fits():
    q = FixedPointQuantizer(clip=1.0, max_clients=10)
    assert q.bound == (2**31 - 1) // 10
    assert q.max_clients * q.bound < 2**31
    assert q.step == pytest.approx(1.0 / q.bound)


def test_values_at_the_clip_bound_map_to_plus_and_minus_B():
    q = FixedPointQuantizer(clip=0.5, max_clients=4)
    out = q.quantize(np.array([0.5, -0.5, 0.0]), np.random.default_rng(0))
    assert out.dtype == np.uint32
    assert list(out.view(np.int32)) == [q.bound, -q.bound, 0]


class AlwaysRoundUp:
    """A generator stand-in whose uniforms are all 0, so any positive fraction rounds up."""

    def random(self, shape):
        return np.zeros(shape)


def test_the_bound_holds_even_when_clip_times_scale_rounds_above_B():
    # For this clip, clip * (B / clip) is one ulp above B in float64; rounding up would give B + 1,
    # which for max_clients=1 is 2^31 and wraps to -2^31.
    clip = 91.2756449721949
    q = FixedPointQuantizer(clip=clip, max_clients=1)
    assert clip * q.scale > q.bound
    out = q.quantize(np.array([clip, -clip]), AlwaysRoundUp())
    assert list(out.view(np.int32)) == [q.bound, -q.bound]


def test_values_beyond_the_clip_are_clipped():
    q = FixedPointQuantizer(clip=1.0, max_clients=4)
    out = q.dequantize(q.quantize(np.array([1e9, -3.0]), np.random.default_rng(0)))
    np.testing.assert_allclose(out, [1.0, -1.0])


@pytest.mark.parametrize("max_clients", [1, 3, 1000])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_sum_of_max_clients_vectors_at_the_bound_does_not_wrap(max_clients, sign):
    clip = 2.0
    q = FixedPointQuantizer(clip=clip, max_clients=max_clients)
    rng = np.random.default_rng(1)
    total = np.zeros(5, dtype=np.uint32)
    for _ in range(max_clients):
        total += q.quantize(np.full(5, sign * clip), rng)
    np.testing.assert_allclose(q.dequantize(total), sign * clip * max_clients, rtol=1e-9)


def test_stochastic_rounding_is_unbiased():
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    x = np.full(200_000, 0.3 * q.step)  # round-to-nearest would give 0 everywhere
    levels = q.quantize(x, np.random.default_rng(2)).view(np.int32)
    assert set(np.unique(levels)) <= {0, 1}
    assert levels.mean() == pytest.approx(0.3, abs=0.01)


def test_rounding_error_is_below_one_step():
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    x = np.random.default_rng(3).uniform(-1, 1, 10_000)
    assert np.abs(q.dequantize(q.quantize(x, np.random.default_rng(4))) - x).max() < q.step


def test_quantize_with_error_returns_what_the_server_will_see():
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    x = np.array([0.25, -2.0, 0.1], dtype=np.float32)
    codes, sent = q.quantize_with_error(x, np.random.default_rng(5))
    assert sent.dtype == np.float32
    np.testing.assert_array_equal(sent, q.dequantize(codes).astype(np.float32))
    assert sent[1] == pytest.approx(-1.0)  # clipping error (-1.0) is left for error feedback


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    with pytest.raises(ValueError, match="NaN or Inf"):
        q.quantize(np.array([0.0, bad]), np.random.default_rng(0))


@pytest.mark.parametrize("clip", [0.0, -1.0, np.nan, np.inf])
def test_bad_clip_is_refused(clip):
    with pytest.raises(ValueError, match="clip"):
        FixedPointQuantizer(clip=clip, max_clients=8)


def test_a_clip_whose_scale_overflows_is_refused_not_quantized_to_garbage():
    """A subnormal clip passed `0 < clip < inf`, and B / clip = inf quantized a zero to int32's minimum (0 * inf)
    and every other value to +-B, all read back as 0."""
    with pytest.raises(ValueError, match=r"clip 1e-320 is too small: its scale B / clip = 32767 / 1e-320"):
        FixedPointQuantizer(clip=1e-320, max_clients=8, bits=20, quant_bits=16)
    tiny = FixedPointQuantizer(clip=1e-300, max_clients=8, bits=20, quant_bits=16)  # small, but its scale is finite
    assert tiny.dequantize(tiny.quantize(np.array([1e-300, 0.0]), np.random.default_rng(0))).tolist() == [1e-300, 0]


@pytest.mark.parametrize("max_clients", [0, -3, 2.5, True])  # True read as 1 client
def test_bad_max_clients_is_refused(max_clients):
    with pytest.raises(ValueError, match="max_clients"):
        FixedPointQuantizer(clip=1.0, max_clients=max_clients)


def test_too_many_clients_for_the_field_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="lower max_clients"):
        FixedPointQuantizer(clip=1.0, max_clients=2**24)


def test_dequantize_refuses_anything_but_uint32():
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    with pytest.raises(ValueError, match="uint32"):
        q.dequantize(np.zeros(3, dtype=np.int64))


class _TopDraws:
    """An rng whose every draw is the largest double below 1 (a legal output of Generator.random)."""

    def random(self, shape):
        return np.full(shape, np.nextafter(1.0, 0.0))


def test_a_value_at_minus_clip_never_quantizes_below_minus_b_whatever_the_draw():
    """At clip 0.3 with 4-bit values, -clip * scale lands one ulp below -B: rounded up by the largest draw it
    would be -B - 1, and a cohort's sum could leave the field's signed range."""
    q = FixedPointQuantizer(0.3, 4, 32, 4)
    assert -0.3 * q.scale < -q.bound
    v = q.lift(q.quantize(np.array([-0.3, 0.3]), _TopDraws()))
    assert v.min() >= -q.bound and v.max() <= q.bound


class _ZeroDraws:
    """An rng whose every draw is 0.0 (a legal output of Generator.random)."""

    def random(self, shape):
        return np.zeros(shape)


def test_a_value_on_a_level_stays_on_it_even_when_the_draw_is_zero():
    """Rounding up happens with probability equal to the fraction: never for a fraction of 0, whatever the draw."""
    q = FixedPointQuantizer(127.0, 1, 32, 8)  # scale 1: integers are levels
    assert q.scale == 1.0
    x = np.array([-127.0, -5.0, 0.0, 3.0, 127.0])
    assert q.lift(q.quantize(x, _ZeroDraws())).tolist() == [-127, -5, 0, 3, 127]


def _safe(b):
    """(quant_bits, clients) for a b-bit field: the widest values a cohort of three can sum in it."""
    if b == 2:
        return 2, 1
    return max(qb for qb in range(2, b + 1) if smallest_safe_bits(qb, 3) <= b), 3


@pytest.mark.parametrize("bits", range(2, 33))
def test_the_masked_sum_lifts_to_the_plain_sum_at_every_field_width(bits):
    """Masks that cancel mod 2^b (not mod 2^32) on top of the quantized values: the lifted field sum is the plain
    sum of the clients' signed values, and dequantizes to it divided by the scale."""
    quant_bits, clients = _safe(bits)
    q = FixedPointQuantizer(clip=0.5, max_clients=clients, bits=bits, quant_bits=quant_bits)
    rng = np.random.default_rng(bits)
    xs = [rng.uniform(-0.7, 0.7, 64) for _ in range(clients - 1)] + [np.full(64, 0.5)]
    masks = rng.integers(0, 2**32, (clients, 64), dtype=np.uint64)
    masks[-1] = (1 << bits) - masks[:-1].sum(axis=0) % (1 << bits) + (rng.integers(0, 2**32, 64, dtype=np.uint64)
                                                                       << np.uint64(bits))
    total, plain = np.zeros(64, np.uint32), np.zeros(64, np.int64)
    for x, mask in zip(xs, masks):
        v = q.quantize(x, rng)
        total += v + mask.astype(np.uint32)  # uint32 wraps mod 2^32; the masks cancel only mod 2^b
        plain += q.lift(v)
    assert (masks.sum(axis=0) % (1 << bits) == 0).all()
    np.testing.assert_array_equal(q.lift(total), plain)
    np.testing.assert_array_equal(q.dequantize(total), plain / q.scale)


def test_with_an_exact_scale_a_sum_dequantizes_to_j_clip_over_b_rounded_once():
    """clip 1 and B = 127: scale 127 exactly, and the sum j reads back as the double nearest j / 127 (multiplying by
    a rounded step 1 / 127 would be off by an ulp for some j)."""
    from fractions import Fraction

    q = FixedPointQuantizer(1.0, 4, 32, 8)
    assert q.scale == 127.0
    j = np.arange(-4 * 127, 4 * 127 + 1)
    assert q.dequantize(j.astype(np.int32).view(np.uint32)).tolist() == [float(Fraction(int(i), 127)) for i in j]


def test_exactly_the_minimum_of_256_levels_is_accepted():
    """(2^19 - 1) // 2047 = 256 levels in a 20-bit field: the least allowed; 2048 clients leave 255, refused."""
    assert FixedPointQuantizer(clip=1.0, max_clients=2047, bits=20).bound == 256
    with pytest.raises(ValueError, match="only B=255 levels"):
        FixedPointQuantizer(clip=1.0, max_clients=2048, bits=20)


def test_stochastic_rounding_is_unbiased_below_zero_too():
    """-0.3 steps rounds to -1 with probability 0.3: rounding toward zero first would always give 0."""
    q = FixedPointQuantizer(clip=1.0, max_clients=8)
    levels = q.lift(q.quantize(np.full(200_000, -0.3 * q.step), np.random.default_rng(5)))
    assert set(np.unique(levels)) <= {-1, 0}
    assert levels.mean() == pytest.approx(-0.3, abs=0.01)


def test_a_value_beyond_the_clip_quantizes_as_the_clip_does_draw_for_draw():
    """At clip 0.37 with 8-bit values, clip * scale lands one ulp below B: the clip itself rounds to B - 1 on the
    largest draw, and so must everything beyond it (scaling before clipping would give B)."""
    q = FixedPointQuantizer(0.37, 4, 32, 8)
    assert 0.37 * q.scale < q.bound
    x = np.array([0.37, 0.5, 40.0, -0.37, -0.5, -40.0])
    v = q.lift(q.quantize(x, _TopDraws()))
    assert v.tolist() == [v[0]] * 3 + [v[3]] * 3 and v[0] == q.bound - 1
