"""Edges of the byte-level helpers that the codec tests leave open: layout and length bounds, the size guard of
unpack_codes, an overlong varint inside a longer stream, and Golomb-Rice blocks at the format's limits."""

import numpy as np
import pytest

from compression import DecodeError
from compression.packing import MAX_LENGTH, check_encodable_length, check_layout, pack_codes, read_layout, unpack_codes
from compression.positions import RICE, VARINT, unpack_positions
from compression.varint import _varint_decode
from position_reference import leb128, reference_rice


def decode(encoding, data, n, k):
    return unpack_positions(encoding, np.frombuffer(bytes(data), dtype=np.uint8), n, k)


# --- packing ------------------------------------------------------------------------------------


def test_layouts_and_lengths_up_to_the_uint32_limit_are_accepted_and_one_more_is_refused():
    assert check_layout([MAX_LENGTH]) == (MAX_LENGTH,)
    with pytest.raises(ValueError, match="more than a payload can hold"):
        check_layout([MAX_LENGTH, 1])
    check_encodable_length(MAX_LENGTH, "test")
    with pytest.raises(ValueError, match="below 2\\*\\*32"):
        check_encodable_length(MAX_LENGTH + 1, "test")


def test_a_bool_is_not_a_layer_size():
    with pytest.raises(ValueError, match="positive integers"):
        check_layout([True, 2])


def test_a_layout_of_one_entry_per_layer_is_read_back():
    """L == n (every layer holds one entry) is the largest legal layout, not a layout with too many layers."""
    payload = np.uint32(3).tobytes() + np.ones(3, dtype="<u4").tobytes()
    sizes, count, offset = read_layout(payload, 0, 3, "test")
    assert sizes.tolist() == [1, 1, 1] and count == 3 and offset == 16


@pytest.mark.parametrize("width", [1, 3, 8, 12])
def test_unpack_codes_refuses_data_of_the_wrong_size(width):
    packed = np.frombuffer(pack_codes(np.ones(10, np.uint32), width), np.uint8)
    for data in (packed[:-1], np.concatenate([packed, [0]]).astype(np.uint8)):
        with pytest.raises(DecodeError, match=f"expected {len(packed)} bytes of {width}-bit codes"):
            unpack_codes(data, 10, width, "test")


# --- varint -------------------------------------------------------------------------------------


def test_a_six_byte_varint_followed_by_more_values_is_refused():
    """With two or more values the window holds a 6-byte varint and the next one; its sixth byte would be ignored."""
    overlong = bytes([0x81, 0x80, 0x80, 0x80, 0x80, 0x01])  # 1 + 2**35: no uint32 takes six bytes
    data = np.frombuffer(overlong + leb128(5) + leb128(7), np.uint8)
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        _varint_decode(data, 3)
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        decode(VARINT, overlong + leb128(5), 2**32 - 1, 2)


# --- rice ---------------------------------------------------------------------------------------


def test_a_rice_block_with_the_largest_parameter_decodes():
    """The format allows b in [0, 32]; a decoder refusing b = 32 rejects valid blocks from another encoder."""
    positions = np.array([5, 2**31, 2**32 - 2])
    block = reference_rice(positions, 32)
    decoded, used = decode(RICE, block, 2**32 - 1, 3)
    assert decoded.tolist() == positions.tolist() and used == len(block)
