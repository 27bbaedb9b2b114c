"""Session ids, X25519 key pairs and pairwise mask seeds.

The session id binds run, round and participant set; it salts every key derivation, so a seed (and
therefore a mask) from one round can never cancel against a mask from another round or cohort.
"""

from __future__ import annotations

import hashlib
import operator
import struct
from collections.abc import Iterable

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import ProtocolError

SESSION_TAG = b"fedsqueeze-secagg-v1"
PAIRWISE_INFO = b"fedsqueeze/pairwise-mask/"
PUBLIC_KEY_BYTES = 32
SEED_BYTES = 32
_MAX_ID = 2**64  # ids are encoded as 8-byte big-endian integers


def client_id(value: object) -> int:
    """Normalize a client id to a plain int in [0, 2^64); anything else is a caller error."""
    if isinstance(value, bool):
        raise ValueError(f"client id must be an integer, got {value!r}")
    try:
        cid = operator.index(value)
    except TypeError:
        raise ValueError(f"client id must be an integer, got {value!r}") from None
    if not 0 <= cid < _MAX_ID:
        raise ValueError(f"client id must lie in [0, 2^64), got {cid}")
    return cid


def session_id(run_id: str, round: int, participants: Iterable[int]) -> bytes:
    """SHA-256 over a length-prefixed encoding of (tag, run id, round, sorted unique participant ids)."""
    run = run_id.encode("utf-8")
    if round < 0:
        raise ValueError(f"round must be >= 0, got {round}")
    ids = sorted({client_id(p) for p in participants})
    encoded = [SESSION_TAG, struct.pack(">I", len(run)), run, struct.pack(">QI", round, len(ids))]
    encoded += [struct.pack(">Q", cid) for cid in ids]
    return hashlib.sha256(b"".join(encoded)).digest()


def generate_keypair() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 key pair and the 32-byte raw public key to advertise."""
    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return private, public


def pairwise_seed(private_key: X25519PrivateKey, peer_public: bytes, session: bytes, a: int, b: int) -> bytes:
    """The 32-byte mask seed that clients a and b both derive (symmetric in a, b).

    HKDF-SHA256 over the X25519 shared secret, salted with the session id, with the ordered pair in
    `info`, so each pair and each round gets an independent seed.
    """
    a, b = client_id(a), client_id(b)
    if a == b:
        raise ValueError(f"a pairwise seed needs two distinct clients, got {a} twice")
    if not isinstance(peer_public, (bytes, bytearray)) or len(peer_public) != PUBLIC_KEY_BYTES:
        raise ProtocolError(f"malformed public key: expected {PUBLIC_KEY_BYTES} bytes")
    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
    except ValueError as exc:  # e.g. a low-order point that yields the all-zero secret
        raise ProtocolError(f"malformed public key: {exc}") from exc
    info = PAIRWISE_INFO + struct.pack(">QQ", min(a, b), max(a, b))
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=session, info=info).derive(shared)
