"""prg_uint32: the AES-256-CTR keystream as uint32 mask material."""

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secagg import prg_uint32

SEED = bytes(range(32))


def test_same_seed_gives_the_same_stream():
    np.testing.assert_array_equal(prg_uint32(SEED, 1000), prg_uint32(SEED, 1000))


def test_different_seeds_give_different_streams():
    other = bytes([1]) + SEED[1:]
    assert not np.array_equal(prg_uint32(SEED, 1000), prg_uint32(other, 1000))


def test_dtype_and_length():
    out = prg_uint32(SEED, 1234)
    assert out.dtype == np.uint32 and out.shape == (1234,)
    assert prg_uint32(SEED, 0).shape == (0,)


def test_a_shorter_stream_is_a_prefix_of_a_longer_one():
    np.testing.assert_array_equal(prg_uint32(SEED, 10), prg_uint32(SEED, 100)[:10])


def test_stream_is_the_aes256_ctr_keystream_read_little_endian():
    # With a zero counter block, the first 16 keystream bytes are AES_k(0^128).
    block = Cipher(algorithms.AES(SEED), modes.ECB()).encryptor().update(bytes(16))
    assert prg_uint32(SEED, 4).astype("<u4").tobytes() == block


def test_stream_looks_uniform():
    out = prg_uint32(SEED, 100_000) / 2.0**32
    assert out.mean() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("size", [0, 16, 31, 33])
def test_seed_must_be_exactly_32_bytes(size):
    with pytest.raises(ValueError, match="32 bytes"):
        prg_uint32(bytes(size), 10)
