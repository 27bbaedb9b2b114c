"""Mask PRG: the AES-256-CTR keystream viewed as little-endian uint32.

Masks must be unpredictable without the seed, so they come from a cipher, never from numpy's
generators (the Mersenne Twister and PCG are not cryptographic). Each seed is used for exactly one
mask (it is derived per pair and per session), so a fixed all-zero counter block is safe.
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
