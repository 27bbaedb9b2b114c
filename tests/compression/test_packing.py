"""Bit packing of w-bit codes and layer layouts, against a bit-at-a-time reference."""

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compression import DecodeError
from compression.packing import check_layout, pack_codes, pack_layout, read_layout, unpack_codes
from position_reference import pack_bits


def reference_stream(codes, width) -> bytes:
    """Code i at bits [i * width, (i + 1) * width) of one little-endian integer."""
    value = 0
    for i, code in enumerate(codes):
        value |= int(code) << (i * width)
    return value.to_bytes((len(codes) * width + 7) // 8, "little")


@given(width=st.integers(1, 32), count=st.one_of(st.integers(0, 600), st.integers(600, 9000)),
       seed=st.integers(0, 2**32 - 1))
def test_pack_codes_matches_the_reference_and_unpacks_back(width, count, seed):
    codes = np.random.default_rng(seed).integers(0, 2**width, count, dtype=np.uint64)
    packed = pack_codes(codes, width)
    assert packed == reference_stream(codes, width)
    if count <= 64:
        assert packed == pack_bits([(int(c) >> j) & 1 for c in codes for j in range(width)])
    unpacked = unpack_codes(np.frombuffer(packed, np.uint8), count, width, "test")
    assert unpacked.astype(np.uint64).tolist() == codes.tolist()


@pytest.mark.parametrize("width", [9, 13, 16, 20, 24, 31, 32])
def test_many_wide_codes_pack_a_chunk_at_a_time_into_the_reference_stream(width, monkeypatch):
    """Codes of 9-31 bits go eight to a group, a chunk of groups at a time: with chunks of 2 groups, counts around
    chunk and group ends give the reference stream and read back, also from an unaligned buffer."""
    from compression import packing

    monkeypatch.setattr(packing, "_CHUNK_GROUPS", 2)
    monkeypatch.setattr(packing, "_WIDE", 0)  # every count takes the wide path
    rng = np.random.default_rng(width)
    for count in (1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 101):
        codes = rng.integers(0, 2**width, count, dtype=np.uint64)
        packed = pack_codes(codes, width)
        assert packed == reference_stream(codes, width)
        unaligned = np.frombuffer(b"\0" + packed, np.uint8)[1:]
        assert unpack_codes(unaligned, count, width, "test").astype(np.uint64).tolist() == codes.tolist()


@pytest.mark.parametrize("width,count", [(3, 5), (6, 1), (1, 7), (12, 3), (31, 1)])
def test_set_padding_bits_are_rejected(width, count):
    packed = bytearray(pack_codes(np.zeros(count, np.uint32), width))
    packed[-1] |= 0x80
    with pytest.raises(DecodeError, match="padding bits"):
        unpack_codes(np.frombuffer(bytes(packed), np.uint8), count, width, "test")


def test_layout_round_trip_and_validation():
    assert pack_layout(None) == struct.pack("<I", 0)
    assert pack_layout((3, 4)) == struct.pack("<III", 2, 3, 4)
    sizes, count, offset = read_layout(b"xx" + pack_layout((3, 4)), 2, 7, "test")
    assert sizes.tolist() == [3, 4] and count == 2 and offset == 14
    assert read_layout(pack_layout(None), 0, 9, "test")[0].tolist() == [9]
    with pytest.raises(DecodeError, match="sums to 7, expected length 8"):
        read_layout(pack_layout((3, 4)), 0, 8, "test")
    with pytest.raises(DecodeError, match="9 layers, more than the length 8"):
        read_layout(struct.pack("<I", 9), 0, 8, "test")
    with pytest.raises(DecodeError, match="truncated"):
        read_layout(struct.pack("<II", 2, 3), 0, 7, "test")
    assert check_layout([1, np.int64(2)]) == (1, 2)
