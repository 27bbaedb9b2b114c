"""Properties every registered codec keeps, checked with hypothesis over lengths 1..5000, ratios in
(0, 1] and float16/32/64 inputs: what decode returns, that len(payload) is the documented size,
and how empty, constant, zero, NaN/Inf and huge inputs are handled."""

import math
import struct
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import compression
from compression import ErrorFeedback
from compression.packing import packed_size
from compression.positions import topk_count
from compression.rotation import padded_length
from position_reference import reference_position_sizes

FLOAT32_MAX = float(np.finfo(np.float32).max)
SPARSE = {"topk", "randk", "ternary", "countsketch"}  # need at least one entry


@st.composite
def vectors(draw, max_n=5000):
    """(input array in its own dtype, the float32 vector the codec sees)."""
    n = draw(st.integers(1, max_n))
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    kind = draw(st.sampled_from(["normal", "constant", "zeros", "ties", "huge", "tiny", "sparse", "mixed"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    top = float(np.finfo(dtype).max) if dtype != np.float64 else FLOAT32_MAX
    if kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "constant":
        x = np.full(n, draw(st.sampled_from([-2.5, 1.0, 7e-3])))
    elif kind == "zeros":
        x = np.zeros(n)
    elif kind == "ties":
        x = rng.integers(-2, 3, n).astype(np.float64)
    elif kind == "huge":
        x = rng.uniform(-1, 1, n) * top
    elif kind == "tiny":
        x = rng.standard_normal(n) * 1e-30
    elif kind == "sparse":
        x = np.where(rng.random(n) < 0.05, rng.standard_normal(n) * 100, 0.0)
    else:
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
    x = np.clip(x, -top, top).astype(dtype)
    return x, x.astype(np.float32)


ratios = st.one_of(st.floats(min_value=0.0, max_value=1.0, exclude_min=True), st.sampled_from([1.0, 0.5, 1e-3]))


def refuses(name, codec, vector32) -> bool:
    """Where a codec must refuse an input with a clear ValueError: a count-sketch cell beyond float32."""
    if name != "countsketch":
        return False
    hashes = codec.hashes(vector32.size)
    for r in range(hashes.rows):
        cells = np.bincount(hashes.buckets[r], weights=hashes.signs[r] * vector32.astype(np.float64),
                            minlength=hashes.cols)
        with np.errstate(over="ignore"):
            if np.isinf(cells.astype(np.float32)).any():
                return True
    return False


def reference_size(name, codec, payload, vector32) -> int:
    """The documented size formula of each built-in codec, recomputed here."""
    n = vector32.size
    if name == "none":
        return 4 * n
    if name == "topk":
        positions = _kept_positions(payload, n)
        return 10 + min(reference_position_sizes(positions, n).values()) + 4 * positions.size
    if name == "randk":
        return 18 + 4 * topk_count(n, codec.ratio)
    if name == "ternary":
        positions = _ternary_positions(codec, vector32)
        return 18 + min(reference_position_sizes(positions, n).values()) + math.ceil(positions.size / 8)
    if name == "qsgd":
        return 15 + math.ceil(n * (1 + codec.levels.bit_length()) / 8)
    if name == "fp16":
        return 5 + 2 * n
    if name == "int8":
        return 13 + n
    if name == "countsketch":
        rows = codec.rows
        return 25 + 4 * rows * max(1, math.floor(Fraction(repr(codec.ratio)) * n / rows))
    if name == "rotation":
        return 18 + math.ceil(padded_length(n) * codec.bits / 8)
    pytest.fail(f"no reference size for codec {name!r}: add its documented formula to reference_size")


def _kept_positions(topk_payload, n):
    return compression.TopKCompression().decode_sparse(topk_payload, n)[0]


def _ternary_positions(codec, vector32):
    """Top-k's positions, less the zeros among them (sign(0) = 0) unless they are all zero."""
    kept = _kept_positions(compression.TopKCompression(codec.ratio).encode(vector32), vector32.size)
    nonzero = kept[vector32[kept] != 0]
    return nonzero if nonzero.size else kept


def check_accuracy(name, codec, payload, decoded, vector32):
    """What decode(encode(x)) must equal, codec by codec."""
    n = vector32.size
    wide = vector32.astype(np.float64)
    if name == "none":
        assert np.array_equal(decoded, vector32)
    elif name == "topk":
        k = codec.k_for(n)
        kept = np.sort(np.argsort(-np.abs(vector32), kind="stable")[:k])
        assert np.array_equal(decoded[kept], vector32[kept]) and not np.delete(decoded, kept).any()
    elif name == "randk":
        positions, values = compression.get(name)().decode_sparse(payload, n)
        assert positions.size == topk_count(n, codec.ratio) and np.array_equal(values, vector32[positions])
        assert not np.delete(decoded, positions).any()
    elif name == "ternary":
        kept = _ternary_positions(codec, vector32)
        mu = np.float32(np.abs(wide[kept]).mean())
        assert np.array_equal(decoded[kept], np.where(vector32[kept] < 0, -mu, mu))
        assert not np.delete(decoded, kept).any()
    elif name == "qsgd":
        r = struct.unpack_from("<f", payload, 11)[0]
        assert r >= min(np.sqrt(np.sum(wide**2)), FLOAT32_MAX)
        assert (np.abs(decoded - wide) <= r / codec.levels * (1 + 1e-6) + np.abs(wide) * 2.0**-23).all()
    elif name == "fp16":
        clipped = np.clip(wide, -65504, 65504)
        assert (np.abs(decoded - clipped) <= np.maximum(np.abs(clipped) * 2.0**-11, 2.0**-25)).all()
    elif name == "int8":
        scale = struct.unpack_from("<f", payload, 9)[0]
        assert (np.abs(decoded - wide) <= scale / 2 + np.abs(wide) * 2.0**-22).all()
    elif name == "countsketch":
        assert np.count_nonzero(decoded) <= codec.k_for(n)
        if not vector32.any():
            assert not decoded.any()
    elif name == "rotation":  # each rotated entry within one level (s / L) of its own; the rotation keeps norms
        scale, levels = struct.unpack_from("<f", payload, 14)[0], 2 ** (codec.bits - 1) - 1
        if scale < FLOAT32_MAX / 4:  # not capped at float32's range (then entries were clipped to it)
            error = np.linalg.norm(decoded.astype(np.float64) - wide)
            assert error <= math.sqrt(padded_length(n)) * scale / levels * (1 + 1e-5) + np.linalg.norm(wide) * 2.0**-20
    else:
        pytest.fail(f"no accuracy check for codec {name!r}: add what it keeps, within which bound, to check_accuracy")


@pytest.mark.parametrize("name", compression.names())
@given(case=vectors(), ratio=ratios)
def test_round_trip_size_and_accuracy(name, case, ratio):
    x, vector32 = case
    codec = compression.get(name)(ratio)
    if refuses(name, codec, vector32):
        with pytest.raises(ValueError, match="overflow"):
            codec.encode(x)
        return
    payload = codec.encode(x)
    assert isinstance(payload, bytes) and payload == codec.encode(x)  # deterministic by default
    decoded = compression.get(name)().decode(payload, x.size)  # the receiver knows only name and length
    codec.check_sender(payload, x.size)  # a server configured as the sender accepts it
    assert decoded.dtype == np.float32 and decoded.shape == (x.size,) and np.isfinite(decoded).all()
    assert decoded.flags.writeable
    assert len(payload) == reference_size(name, codec, payload, vector32)
    assert len(payload) <= codec.size(x.size)
    check_accuracy(name, codec, payload, decoded, vector32)


@pytest.mark.parametrize("name", compression.names())
@given(case=vectors(max_n=2000), ratio=ratios, residual_seed=st.integers(0, 2**32 - 1))
def test_error_feedback_keeps_decoded_plus_new_residual_equal_to_input_plus_old_residual(name, case, ratio,
                                                                                           residual_seed):
    x, vector32 = case
    scale = float(np.abs(vector32).max()) if vector32.any() else 1.0
    residual = (np.random.default_rng(residual_seed).standard_normal(x.size) * min(scale, 1e30)).astype(np.float32)
    corrected = vector32.astype(np.float64) + residual
    codec = compression.get(name)(ratio)
    with np.errstate(over="ignore"):
        overflows = not np.isfinite(corrected.astype(np.float32)).all()
    if overflows or refuses(name, codec, corrected.astype(np.float32)):
        return  # the sum overflows float32: encode refuses it (tested elsewhere)
    payload, new_residual = ErrorFeedback(codec).encode(x, residual)
    decoded = codec.decode(payload, x.size).astype(np.float64)
    assert new_residual.dtype == np.float32 and new_residual.shape == (x.size,)
    # float32 rounding of `update + residual` and of `corrected - decoded`: one ulp of the largest term each
    magnitude = np.maximum(np.abs(corrected), np.abs(decoded))
    assert (np.abs(decoded + new_residual - corrected) <= 2 * magnitude * 2.0**-23 + 1e-45).all()


def _variants(name, n):
    """The codec at a ratio, and with the options that change its payload's layout."""
    cls = compression.get(name)
    out = [cls(0.3)]
    if name in ("topk", "ternary", "qsgd", "int8") and n >= 3:
        out.append(cls(0.3, layout=[n // 3, n // 3, n - 2 * (n // 3)]))
    options = {"randk": {"unbiased": True}, "qsgd": {"levels": 300}, "rotation": {"bits": 3},
               "countsketch": {"rows": 1}}
    if name in options:
        out.append(cls(0.3, **options[name]))
    return out


def _header_extremes(codec, payload, n):
    """The payload with each field of its header (the codec module's `_HEADER`, if it has one) at its extremes and
    one past its value, with and without four more bytes (a count one higher needs one more float32)."""
    header = getattr(sys.modules[type(codec).__module__], "_HEADER", None)
    if header is None:
        return
    fields = header.unpack_from(payload)
    for j, kind in enumerate(header.format.lstrip("<")):
        if kind == "f":
            values = [math.nan, math.inf, -1.0, -0.0]
        else:
            top = 2 ** (8 * struct.calcsize(kind)) - 1
            values = sorted({0, 1, top, min(fields[j] + 1, top), n + 1 if n < top else top})
        for value in values:
            head = header.pack(*fields[:j], value, *fields[j + 1:])
            yield head + payload[header.size:]
            yield head + payload[header.size:] + bytes(4)


@pytest.mark.parametrize("name", compression.names())
def test_a_corrupted_payload_is_refused_or_decodes_to_finite_values(name):
    """What a server may meet from a broken or hostile sender (the wire's checksum is the sender's): every cut and
    every extension is refused by name; a float32 NaN, Inf, -1 or 3.4e38 written at any offset, any byte flipped,
    any header field at its extremes is refused (DecodeError) or decodes to a finite float32 vector of the length
    asked for, with strictly increasing positions in range: never NaN or Inf into the server's sum."""
    rng = np.random.default_rng(52)
    for n in (1, 9, 100):
        vector = rng.standard_normal(n).astype(np.float32)
        vector[::4] = 0
        for codec in _variants(name, n):
            payload = codec.encode(vector)
            for cut in range(len(payload)):
                with pytest.raises(compression.DecodeError, match="truncated"):
                    codec.decode(payload[:cut], n)
            with pytest.raises(compression.DecodeError, match="trailing"):
                codec.decode(payload + b"\0", n)
            floats = (struct.pack("<f", bad) for bad in (math.nan, math.inf, -1.0, 3.4e38))
            altered = [payload[:i] + f + payload[i + 4:] for f in floats for i in range(len(payload) - 3)]
            altered += [payload[:i] + bytes([payload[i] ^ bits]) + payload[i + 1:]
                        for bits in (0x01, 0x80, 0xFF) for i in range(len(payload))]
            for corrupted in [*altered, *_header_extremes(codec, payload, n)]:
                try:
                    decoded = codec.decode(corrupted, n)
                except compression.DecodeError:
                    continue
                assert decoded.dtype == np.float32 and decoded.shape == (n,) and np.isfinite(decoded).all()
                if hasattr(codec, "decode_sparse"):
                    positions, values = codec.decode_sparse(corrupted, n)
                    assert (np.diff(positions) > 0).all() and 0 <= positions[0] and positions[-1] < n
                    assert np.isfinite(values).all()


@pytest.mark.parametrize("name", compression.names())
def test_empty_input_round_trips_for_dense_codecs_and_is_refused_by_sparse_ones(name):
    codec = compression.get(name)(0.5)
    if name in SPARSE:
        with pytest.raises(ValueError, match="empty"):
            codec.encode(np.zeros(0, np.float32))
    else:
        assert codec.decode(codec.encode(np.zeros(0, np.float32)), 0).shape == (0,)


@pytest.mark.parametrize("name", compression.names())
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e39])
def test_nan_inf_and_float32_overflow_are_refused(name, bad):
    vector = np.ones(100)
    vector[17] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        compression.get(name)(0.1).encode(vector)


@pytest.mark.parametrize("name", compression.names())
def test_constant_and_all_zero_vectors_have_defined_results(name):
    codec = compression.get(name)(0.1)
    assert not codec.decode(codec.encode(np.zeros(1000)), 1000).any()
    constant = np.full(1000, -0.75, np.float32)
    decoded = codec.decode(codec.encode(constant), 1000)
    assert np.isfinite(decoded).all()
    if name != "countsketch":  # a sketch's estimates mix signed buckets; the others keep signs
        assert (decoded <= 0).all() and decoded.any()


@pytest.mark.parametrize("name", compression.names())
def test_every_codec_is_built_from_a_ratio_alone_and_says_whether_it_is_biased(name):
    cls = compression.get(name)
    for ratio in (1.0, 0.5, 0.01):
        codec = cls(ratio)
        assert codec.name == name and isinstance(codec.biased, bool) and codec.ratio == ratio
    assert cls.__doc__ and "Size" in cls.__doc__  # the size formula lives in the class docstring


def test_countsketch_tables_are_linear():
    rng = np.random.default_rng(0)
    codec = compression.get("countsketch")(0.1, rows=3)
    for n in (1, 17, 1000, 4999):
        a, b = rng.standard_normal((2, n)).astype(np.float32)
        np.testing.assert_allclose(codec.sketch_table(a) + codec.sketch_table(b), codec.sketch_table(a + b),
                                   atol=1e-4 * max(1.0, math.sqrt(n)))


def test_biased_flags():
    expected = {"none": False, "topk": True, "randk": True, "ternary": True, "qsgd": False, "fp16": True,
                "int8": True, "countsketch": True}
    assert {name: compression.get(name)().biased for name in expected} == expected
    assert compression.get("randk")(0.1, unbiased=True).biased is False


def test_packed_size_helper():
    assert packed_size(3, 6) == 3 and packed_size(0, 5) == 0 and packed_size(1, 1) == 1


@pytest.mark.parametrize("name", ["qsgd", "int8", "ternary"])
def test_a_scale_of_minus_0_is_refused(name):
    """A sign bit on a zero scale is a non-canonical encoding (the encoders write +0.0; rotation refuses it too): it
    would decode a zero tensor to -0.0 entries, so two senders' bytes could differ for the same vector."""
    codec = compression.get(name)()
    payload = bytearray(codec.encode(np.zeros(8, np.float32)))
    offset = sys.modules[type(codec).__module__]._HEADER.size + 4  # after the header and L = 0
    assert struct.unpack_from("<f", payload, offset) == (0.0,)
    assert not np.signbit(codec.decode(bytes(payload), 8)).any()
    struct.pack_into("<f", payload, offset, -0.0)
    with pytest.raises(compression.DecodeError, match=r"not -0\.0"):
        codec.decode(bytes(payload), 8)
