"""Float16Compression: IEEE half precision, saturating at +-65504."""

import struct

import numpy as np
import pytest

from compression import DecodeError, Float16Compression


def test_round_trip_is_numpys_float16_rounding_within_the_relative_bound():
    vector = (np.random.default_rng(0).standard_normal(5000) * np.logspace(-9, 4, 5000)).astype(np.float32)
    decoded = Float16Compression().decode(Float16Compression().encode(vector), 5000)
    assert np.array_equal(decoded, vector.astype(np.float16).astype(np.float32))
    assert (np.abs(decoded - vector) <= np.maximum(np.abs(vector) * 2.0**-11, 2.0**-25)).all()


def test_payload_layout_and_size_5_plus_2n():
    payload = Float16Compression().encode(np.array([1.0, -2.5, 0.0], dtype=np.float32))
    assert payload == struct.pack("<BI", 1, 3) + np.array([1.0, -2.5, 0.0], "<f2").tobytes()
    assert len(payload) == 5 + 2 * 3 == Float16Compression().size(3)


def test_values_beyond_float16_saturate():
    decoded = Float16Compression().decode(Float16Compression().encode(np.array([1e38, -70000.0, 65519.0])), 3)
    assert decoded.tolist() == [65504.0, -65504.0, 65504.0]


def test_empty_round_trips_and_nan_is_refused():
    assert Float16Compression().decode(Float16Compression().encode(np.zeros(0)), 0).shape == (0,)
    with pytest.raises(ValueError, match="NaN or Inf"):
        Float16Compression().encode(np.array([np.inf]))


def test_decode_rejects_malformed_payloads():
    codec = Float16Compression()
    payload = codec.encode(np.ones(4))
    with pytest.raises(DecodeError, match="truncated: expected 13 bytes, got 12"):
        codec.decode(payload[:-1], 4)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(payload + b"\x00", 4)
    with pytest.raises(DecodeError, match="NaN or Inf"):
        codec.decode(payload[:-2] + np.array([np.inf], "<f2").tobytes(), 4)
    with pytest.raises(DecodeError, match="for length 4, but length 5"):
        codec.decode(payload, 5)
    with pytest.raises(DecodeError, match="version 0"):
        codec.decode(b"\x00" + payload[1:], 4)
    with pytest.raises(DecodeError, match="truncated"):
        codec.decode(b"\x01", 4)


def test_codec_metadata():
    assert Float16Compression.name == "fp16" and Float16Compression.biased is True and not Float16Compression.uses_ratio
