"""NoCompression: the dense baseline."""

import struct

import numpy as np
import pytest

from compression import DecodeError, NoCompression


def test_round_trip_is_bitwise_exact():
    vector = np.random.default_rng(0).standard_normal(1001).astype(np.float32)
    decoded = NoCompression().decode(NoCompression().encode(vector), 1001)
    assert np.array_equal(decoded.view(np.uint32), vector.view(np.uint32))
    assert decoded.dtype == np.float32 and decoded.flags.writeable


def test_payload_is_little_endian_float32_of_size_4n():
    payload = NoCompression().encode(np.array([1.5, -2.0, 0.1], dtype=np.float32))
    assert payload == struct.pack("<3f", 1.5, -2.0, 0.1)
    assert len(payload) == NoCompression().size(3) == 12


def test_empty_vector_round_trips():
    assert NoCompression().decode(NoCompression().encode(np.zeros(0)), 0).shape == (0,)


def test_wrong_payload_length_is_rejected():
    payload = NoCompression().encode(np.ones(4, dtype=np.float32))
    with pytest.raises(DecodeError, match="truncated: expected 16 bytes, got 15"):
        NoCompression().decode(payload[:-1], 4)
    with pytest.raises(DecodeError, match="trailing bytes: expected 16 bytes, got 17"):
        NoCompression().decode(payload + b"\x00", 4)


def test_nan_in_payload_is_rejected():
    with pytest.raises(DecodeError, match="NaN or Inf"):
        NoCompression().decode(struct.pack("<2f", 1.0, float("nan")), 2)


def test_encode_rejects_nan_inf_and_2d_input():
    with pytest.raises(ValueError, match="contains NaN or Inf"):
        NoCompression().encode(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="1-D"):
        NoCompression().encode(np.ones((2, 2)))


def test_codec_metadata():
    assert NoCompression.name == "none" and NoCompression.biased is False
