"""TernaryCompression: top-k positions, each sent as +-mu, mu the mean kept magnitude of its tensor."""

import math
import struct

import numpy as np
import pytest

from compression import DecodeError, TernaryCompression, TopKCompression
from position_reference import reference_position_sizes


def random_vector(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("n,ratio", [(1, 1.0), (10, 0.5), (1000, 0.1), (10_000, 0.01), (10_000, 0.5)])
def test_keeps_topk_positions_with_sign_times_mean_kept_magnitude(n, ratio):
    vector = random_vector(n)
    codec = TernaryCompression(ratio)
    payload = codec.encode(vector)
    decoded = TernaryCompression().decode(payload, n)
    topk_positions, _ = TopKCompression(ratio).decode_sparse(TopKCompression(ratio).encode(vector), n)
    mu = np.float32(np.abs(vector[topk_positions].astype(np.float64)).mean())
    assert np.flatnonzero(decoded).tolist() == topk_positions.tolist()
    assert np.array_equal(decoded[topk_positions], np.where(vector[topk_positions] < 0, -mu, mu))
    k = math.ceil(ratio * n)
    assert len(payload) == 18 + min(reference_position_sizes(topk_positions, n).values()) + math.ceil(k / 8)
    assert len(payload) == codec.encoded_size(topk_positions, n) <= codec.size(n)


def test_payload_layout_byte_for_byte():
    vector = np.array([0.5, -4.0, 1.0, 2.0], dtype=np.float32)
    payload = TernaryCompression(0.5).encode(vector)  # keeps -4 and 2: mu = 3
    bitmap = bytes([0b1010])
    assert payload == struct.pack("<BIII", 1, 4, 2, 0) + struct.pack("<f", 3.0) + b"\x00" + bitmap + bytes([0b01])
    assert TernaryCompression().decode(payload, 4).tolist() == [0.0, -3.0, 0.0, 3.0]


def test_per_layer_selection_and_magnitudes():
    vector = np.array([10.0, -20.0, 30.0, 0.1, -0.2, 0.3], dtype=np.float32)
    codec = TernaryCompression(0.5, layout=[3, 3])
    decoded = codec.decode(codec.encode(vector), 6)
    assert decoded.tolist() == pytest.approx([0.0, -25.0, 25.0, 0.0, -0.25, 0.25])
    assert len(codec.encode(vector)) == 9 + 4 + 8 + 8 + 1 + 1 + 1 == codec.size(6)


def test_all_zero_and_huge_inputs():
    codec = TernaryCompression(0.1)
    assert not codec.decode(codec.encode(np.zeros(100)), 100).any()
    huge = np.full(50, -3.4e38, np.float32)
    assert (codec.decode(codec.encode(huge), 50)[:5] == np.float32(-3.4e38)).all()
    with pytest.raises(ValueError, match="empty"):
        codec.encode(np.zeros(0))


def test_decode_rejects_malformed_payloads():
    codec = TernaryCompression(0.5)
    payload = codec.encode(np.array([0.5, -4.0, 1.0, 2.0], dtype=np.float32))
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            codec.decode(payload[:cut], 4)
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(payload + b"\x00", 4)
    with pytest.raises(DecodeError, match="padding bits"):
        codec.decode(payload[:-1] + bytes([0b101]), 4)
    with pytest.raises(DecodeError, match="magnitudes must be finite"):
        codec.decode(payload[:13] + struct.pack("<f", -1.0) + payload[17:], 4)
    with pytest.raises(DecodeError, match="sign bit set on an entry whose magnitude is 0"):
        codec.decode(payload[:13] + struct.pack("<f", 0.0) + payload[17:], 4)
    with pytest.raises(DecodeError, match="unknown ternary position encoding 9"):
        codec.decode(payload[:17] + b"\x09" + payload[18:], 4)
    with pytest.raises(DecodeError, match="bitmap has 3 bits set, expected k=2"):
        codec.decode(payload[:18] + bytes([0b1011]) + payload[19:], 4)
    with pytest.raises(DecodeError, match="version 2"):
        codec.decode(b"\x02" + payload[1:], 4)
    with pytest.raises(DecodeError, match="k=5 out of range"):
        codec.decode(payload[:5] + struct.pack("<I", 5) + payload[9:], 4)


def test_codec_metadata():
    assert TernaryCompression.name == "ternary" and TernaryCompression.biased is True


def test_zeros_among_the_top_k_are_not_sent_so_they_decode_to_zero_not_to_plus_mu():
    """k above the nonzeros (ratio 1, or a sparse layer): a kept 0 decoded to +mu, and pulled mu down."""
    codec = TernaryCompression(1.0)
    np.testing.assert_array_equal(codec.decode(codec.encode(np.array([5, -3, 0, 0, -0.0, 1], np.float32)), 6),
                                  np.array([3, -3, 0, 0, 0, 3], np.float32))
    layered = TernaryCompression(1.0, layout=[3, 3])  # the second layer holds only zeros: its mu is 0
    np.testing.assert_array_equal(layered.decode(layered.encode(np.array([4, 0, -4, 0, 0, 0], np.float32)), 6),
                                  np.array([4, 0, -4, 0, 0, 0], np.float32))
    assert not codec.decode(codec.encode(np.zeros(4, np.float32)), 4).any()


def test_a_layers_first_entry_counts_in_that_layers_magnitude():
    """Position 3 opens the second layer of [3, 3]: its magnitude joins that layer's mean, not the first's."""
    vector = np.array([10.0, -20.0, 30.0, 0.3, -0.2, 0.1], dtype=np.float32)
    codec = TernaryCompression(0.5, layout=[3, 3])
    payload = codec.encode(vector)
    assert np.frombuffer(payload, "<f4", count=2, offset=9 + 4 + 8).tolist() == pytest.approx([25.0, 0.25])
    assert codec.decode(payload, 6).tolist() == pytest.approx([0.0, -25.0, 25.0, 0.25, -0.25, 0.0])


def test_a_payload_of_no_kept_entries_is_refused():
    """k = 0 with an empty bitmap is well formed byte for byte, but the encoder never writes it (it keeps >= 1)."""
    payload = TernaryCompression(0.5).encode(np.array([0.5, -4.0, 1.0, 2.0], dtype=np.float32))
    assert payload[17] == 0  # the bitmap encoding: one byte, then one byte of signs
    empty = payload[:5] + struct.pack("<I", 0) + payload[9:18] + b"\x00"
    with pytest.raises(DecodeError, match="k=0 out of range"):
        TernaryCompression().decode(empty, 4)
