"""Int8Compression: q * scale with q in [-127, 127], within scale/2 of the input."""

import struct

import numpy as np
import pytest

from compression import DecodeError, Int8Compression


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("vector", [random_vector(1000), np.full(7, -3.0), np.array([1e-30, 0.0]),
                                    np.array([3.4e38, -1e38, 5.0]), np.array([np.finfo(np.float32).max])])
def test_within_half_a_scale_and_the_extreme_is_exact_to_rounding(vector):
    vector = np.asarray(vector, np.float32)
    payload = Int8Compression().encode(vector)
    scale = struct.unpack_from("<f", payload, 9)[0]
    assert 127 * np.float64(scale) >= np.abs(vector).max() * (1 - 2.0**-22)  # >= exactly unless that overflows
    decoded = Int8Compression().decode(payload, vector.size)
    assert np.isfinite(decoded).all()
    bound = np.float64(scale) / 2 + np.abs(vector.astype(np.float64)) * 2.0**-23
    assert (np.abs(decoded.astype(np.float64) - vector) <= bound).all()


def test_payload_layout_and_size_13_plus_n():
    payload = Int8Compression().encode(np.array([127.0, -63.4, 0.2], dtype=np.float32))
    assert payload == struct.pack("<BIIf", 1, 3, 0, 1.0) + np.array([127, -63, 0], np.int8).tobytes()
    assert len(payload) == 13 + 3 == Int8Compression().size(3)
    codec = Int8Compression(layout=[1, 2])
    assert len(codec.encode(np.ones(3))) == 9 + 4 * 2 + 4 * 2 + 3 == codec.size(3)


def test_per_layer_scales():
    vector = np.array([1000.0, 0.001, -0.002], dtype=np.float32)
    codec = Int8Compression(layout=[1, 2])
    decoded = codec.decode(codec.encode(vector), 3)
    assert decoded[0] == 1000.0 and abs(decoded[2] + 0.002) < 1e-9
    assert not Int8Compression().decode(Int8Compression().encode(vector), 3)[1:].any()  # one scale: lost


def test_zero_and_empty():
    assert not Int8Compression().decode(Int8Compression().encode(np.zeros(10)), 10).any()
    assert Int8Compression().decode(Int8Compression().encode(np.zeros(0)), 0).shape == (0,)


def test_decode_rejects_malformed_payloads():
    codec = Int8Compression()
    header = struct.pack("<BII", 1, 3, 0)
    assert codec.decode(header + struct.pack("<f", 0.5) + bytes([2, 0, 254]), 3).tolist() == [1.0, 0.0, -1.0]
    with pytest.raises(DecodeError, match="-128"):
        codec.decode(header + struct.pack("<f", 0.5) + bytes([0x80, 0, 0]), 3)
    with pytest.raises(DecodeError, match="scale is 0"):
        codec.decode(header + struct.pack("<f", 0.0) + bytes([1, 0, 0]), 3)
    with pytest.raises(DecodeError, match="scales must be finite"):
        codec.decode(header + struct.pack("<f", np.inf) + bytes(3), 3)
    with pytest.raises(DecodeError, match="scales must be finite"):
        codec.decode(header + struct.pack("<f", -1.0) + bytes(3), 3)
    with pytest.raises(DecodeError, match="beyond float32"):
        codec.decode(header + struct.pack("<f", 3e38) + bytes([127, 0, 0]), 3)
    payload = Int8Compression(layout=[1, 2]).encode(np.ones(3))
    with pytest.raises(DecodeError, match="scale is 0"):
        codec.decode(payload[:17] + struct.pack("<f", 0.0) + payload[21:], 3)
    with pytest.raises(DecodeError, match="empty layer"):
        codec.decode(payload[:9] + struct.pack("<I", 0) + payload[13:], 3)
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], 3)
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(payload + b"\x00", 3)


def test_the_scale_is_rounded_up_so_that_127_scales_reach_the_peak():
    """float32(1 / 127) * 127 < 1: the scale is one float32 step above, the smallest with 127 * scale >= max|v|."""
    payload = Int8Compression().encode(np.array([1.0, -0.25], dtype=np.float32))
    scale = np.frombuffer(payload, "<f4", count=1, offset=9)[0]
    assert float(np.float32(1 / 127)) * 127 < 1.0
    assert float(scale) * 127 >= 1.0 > float(np.nextafter(scale, np.float32(0))) * 127
    per_layer = Int8Compression(layout=[1, 1]).encode(np.array([1.0, 1.0], dtype=np.float32))
    assert np.frombuffer(per_layer, "<f4", count=2, offset=5 + 4 + 8).tolist() == [scale, scale]
