"""X25519 key pairs and their checks, pairwise mask seeds and the encrypted transport of Shamir shares.

The session id (secagg/round.py) salts every key derivation, so a seed (and therefore a mask) from one
round can never cancel against a mask from another round, cohort, configuration or run, and a share
ciphertext from one round never decrypts in another.

Public keys are checked before use (`key_problem`, then `key_class`): a non-canonical encoding (bit 255 set, or
u >= p) is another byte form of a key that passes a byte-wise duplicate check, and a low-order point makes the
agreement all zeros; cryptography raises on the latter, so an exchange against any key tells. A canonical
key plus a low-order point is a third form (X25519 clamps private keys to multiples of 8, so every agreement
with it is the key's own): `key_class` gives both forms the same value, so the server compares duplicates by
class at advertise (a client's roster check compares bytes).

Share transport (client u -> client v through the server): AES-256-GCM under
HKDF-SHA256(X25519(c_sk_u, c_pk_v), salt = session, info = purpose + (u, v) in that order), with the
session and (u, v) as associated data. The plaintext repeats (u, v) and carries u's share of its self-mask
seed and of its mask secret key. Each direction of each pair has its own key, used for exactly one message
per session, so a fixed all-zero nonce is safe (and saves 12 bytes per ciphertext).
"""

from __future__ import annotations

import hashlib
import operator
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import ProtocolError

PAIRWISE_INFO = b"fedsqueeze/pairwise-mask/"
TRANSPORT_INFO = b"fedsqueeze/share-transport/"
PUBLIC_KEY_BYTES = 32
SEED_BYTES = 32
_MAX_ID = 2**64  # ids are encoded as 8-byte big-endian integers
_NONCE = bytes(12)  # safe: every transport key encrypts exactly one message
_IDS = struct.Struct(">II")  # (sender, recipient) at the head of a share plaintext (ids < 2^31, see round.py)
SHARE_PLAINTEXT_HEADER = _IDS.size
AEAD_TAG_BYTES = 16


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


def generate_keypair(seed: bytes | None = None) -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 key pair and the 32-byte raw public key to advertise. With `seed` the pair is derived
    from it instead: a simulation seeds its clients' keys so that a rerun draws the same SecAgg+ graph;
    a deployment leaves it None (keys from the operating system's randomness)."""
    private = (X25519PrivateKey.generate() if seed is None else
               X25519PrivateKey.from_private_bytes(hashlib.sha256(b"fedsqueeze/seeded-key/" + seed).digest()))
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return private, public


def public_bytes(private_key: X25519PrivateKey) -> bytes:
    """The 32-byte raw public key of a private key (to check a reconstructed key against its advertisement)."""
    return private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_bytes(private_key: X25519PrivateKey) -> bytes:
    """The 32 raw bytes of a private key: the secret that is Shamir-shared."""
    return private_key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())


def private_from_bytes(raw: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(raw)


_P = 2**255 - 19
LOW_ORDER = "low-order public key (the agreement would be all zeros)"


def key_problem(key: object) -> str | None:
    """Why `key` is no X25519 public key to accept (None if it is) by its bytes: size, non-canonical form. Low
    order takes an exchange: `key_class` tells it."""
    if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES:
        return f"malformed public key (expected {PUBLIC_KEY_BYTES} bytes)"
    if key[-1] & 0x80 or int.from_bytes(key, "little") >= _P:
        return "non-canonical public key (bit 255 set or u >= 2^255 - 19)"
    return None


def key_class(key: bytes, probe: X25519PrivateKey) -> bytes | None:
    """What every agreement sees of a canonical 32-byte `key`: its agreement with `probe`; None if it is low-order.
    Two keys share a class exactly when one is the other plus a point of order 2, 4 or 8 (u and 1/u, for one), so
    every agreement with them is the same: the keys a duplicate check must take as one."""
    try:
        return probe.exchange(X25519PublicKey.from_public_bytes(key))
    except ValueError:
        return None


def _exchange(private_key: X25519PrivateKey, peer_public: bytes) -> bytes:
    if not isinstance(peer_public, (bytes, bytearray)) or len(peer_public) != PUBLIC_KEY_BYTES:
        raise ProtocolError(f"malformed public key: expected {PUBLIC_KEY_BYTES} bytes")
    try:
        return private_key.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
    except ValueError as exc:  # e.g. a low-order point that yields the all-zero secret
        raise ProtocolError(f"malformed public key: {exc}") from exc


def transport_keys(private_key: X25519PrivateKey, peer_public: bytes, session: bytes, me: int,
                   peer: int) -> tuple[bytes, bytes]:
    """(key for me -> peer, key for peer -> me): AES-256-GCM keys from one X25519 agreement."""
    me, peer = client_id(me), client_id(peer)
    if me == peer:
        raise ValueError(f"transport keys need two distinct clients, got {me} twice")
    shared = _exchange(private_key, peer_public)

    def derive(src: int, dst: int) -> bytes:
        info = TRANSPORT_INFO + struct.pack(">QQ", src, dst)
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=session, info=info).derive(shared)

    return derive(me, peer), derive(peer, me)


def _associated_data(session: bytes, src: int, dst: int) -> bytes:
    return session + struct.pack(">QQ", src, dst)


def encrypt_shares(key: bytes, session: bytes, src: int, dst: int, payload: bytes) -> bytes:
    """AES-256-GCM of (src, dst, payload), bound to the session and (src, dst) as associated data."""
    plaintext = _IDS.pack(src, dst) + payload
    return AESGCM(key).encrypt(_NONCE, plaintext, _associated_data(session, src, dst))


def decrypt_shares(key: bytes, session: bytes, src: int, dst: int, ciphertext: bytes) -> bytes:
    """The payload of a share ciphertext from src to dst; ProtocolError if it fails to authenticate or
    names another sender or recipient than the one it was delivered as."""
    if not isinstance(ciphertext, (bytes, bytearray)):
        raise ProtocolError(f"share ciphertext from client {src} is not bytes")
    try:
        plaintext = AESGCM(key).decrypt(_NONCE, bytes(ciphertext), _associated_data(session, src, dst))
    except InvalidTag:
        raise ProtocolError(f"share ciphertext from client {src} to client {dst} failed to authenticate") from None
    if len(plaintext) < _IDS.size:
        raise ProtocolError(f"share plaintext from client {src} is truncated")
    got_src, got_dst = _IDS.unpack_from(plaintext)
    if (got_src, got_dst) != (src, dst):
        raise ProtocolError(f"share from client {src} to client {dst} names sender {got_src} and recipient {got_dst}")
    return plaintext[_IDS.size:]


def pairwise_seed(private_key: X25519PrivateKey, peer_public: bytes, session: bytes, a: int, b: int) -> bytes:
    """The 32-byte mask seed that clients a and b both derive (symmetric in a, b).

    HKDF-SHA256 over the X25519 shared secret, salted with the session id, with the ordered pair in
    `info`, so each pair and each round gets an independent seed.
    """
    a, b = client_id(a), client_id(b)
    if a == b:
        raise ValueError(f"a pairwise seed needs two distinct clients, got {a} twice")
    shared = _exchange(private_key, peer_public)
    info = PAIRWISE_INFO + struct.pack(">QQ", min(a, b), max(a, b))
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=session, info=info).derive(shared)
