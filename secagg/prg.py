"""Mask PRG: the AES-256-CTR keystream viewed as little-endian uint32.

Masks must be unpredictable without the seed, so they come from a cipher, never from numpy's
generators (the Mersenne Twister and PCG are not cryptographic). Each seed is used for exactly one
mask (it is derived per pair and per session), so a fixed all-zero counter block is safe.

`add_prg` adds or subtracts a mask in place through a caller-owned scratch buffer: most of the cost of
`prg_uint32` on large vectors is fresh memory (page faults and copies), not AES; reusing one buffer
makes a 10^6-element mask about 6x cheaper.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

SEED_BYTES = 32
_ZERO_NONCE = bytes(16)


def prg_uint32(seed: bytes, length: int) -> np.ndarray:
    """`length` pseudorandom uint32 values expanded from a 32-byte seed (deterministic per seed)."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != SEED_BYTES:
        raise ValueError(f"PRG seed must be exactly {SEED_BYTES} bytes")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    encryptor = Cipher(algorithms.AES(bytes(seed)), modes.CTR(_ZERO_NONCE)).encryptor()
    keystream = encryptor.update(bytes(4 * length))
    # astype copies into a writable, native-order array (frombuffer over bytes is read-only).
    return np.frombuffer(keystream, dtype="<u4").astype(np.uint32)


_zeros = bytearray()  # grows to the longest keystream requested; only ever read


def _zero_input(nbytes: int) -> memoryview:
    global _zeros
    if len(_zeros) < nbytes:
        _zeros = bytearray(nbytes)
    return memoryview(_zeros)[:nbytes]


def scratch_for(length: int) -> np.ndarray:
    """A scratch buffer for add_prg on vectors of `length` (AES-CTR update_into needs 15 spare bytes)."""
    return np.empty(length + 4, dtype=np.uint32)


def add_prg(acc: np.ndarray, seed: bytes, subtract: bool = False, scratch: np.ndarray | None = None) -> None:
    """acc += PRG(seed) (or -=) in place, mod 2^32: the same stream as prg_uint32(seed, len(acc))."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != SEED_BYTES:
        raise ValueError(f"PRG seed must be exactly {SEED_BYTES} bytes")
    if acc.dtype != np.uint32 or acc.ndim != 1 or not acc.flags.c_contiguous:
        raise ValueError("add_prg needs a contiguous 1-D uint32 accumulator")
    length = acc.shape[0]
    if scratch is None or scratch.dtype != np.uint32 or scratch.shape[0] < length + 4:
        scratch = scratch_for(length)
    encryptor = Cipher(algorithms.AES(bytes(seed)), modes.CTR(_ZERO_NONCE)).encryptor()
    encryptor.update_into(_zero_input(4 * length), memoryview(scratch).cast("B"))
    stream = scratch[:length]
    if not np.little_endian:
        stream = stream.byteswap()  # the keystream is read little-endian on every platform
    if subtract:
        np.subtract(acc, stream, out=acc)
    else:
        np.add(acc, stream, out=acc)
