"""Messages of one masked round (Bonawitz et al. 2017 / SecAgg+), as plain frozen dataclasses.

The state machines take and return these; fl/wire.py turns them into bytes and back (and validates).
Every message carries the round's session id, so a message replayed from another round (or run, cohort or
configuration, see secagg.session_id) is refused.
Id-keyed tuples are sorted by id.

    1. AdvertiseKeys  client -> server    two X25519 public keys (share transport c, masks s)
       KeyRoster      server -> clients   every advertised key pair: U1
    2. ShareKeys      client -> server    per neighbour, an AES-GCM ciphertext of u's shares of b_u and s_sk_u
       ShareBundle    server -> client    the ciphertexts addressed to that client: senders = U2
    3. MaskedInput    client -> server    y_u = q_u + PRG(b_u) +- PRG(s_uv), uint32
       UnmaskRequest  server -> clients   survivors U3 (masked input arrived) and dropped U2 \\ U3
    4. UnmaskResponse client -> server    shares of b for survivors, of s_sk for dropped clients
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class AdvertiseKeys:
    """Client -> server: this client's two fresh public keys for the round."""

    session: bytes
    client_id: int
    cipher_public_key: bytes  # c_pk: agreement for the share transport
    mask_public_key: bytes  # s_pk: agreement for the pairwise masks


@dataclass(frozen=True)
class KeyRoster:
    """Server -> every client: (client id, c_pk, s_pk) of every client that advertised, sorted by id."""

    session: bytes
    keys: tuple[tuple[int, bytes, bytes], ...]


@dataclass(frozen=True)
class ShareKeys:
    """Client -> server: (recipient id, ciphertext) for each neighbour in the roster, sorted by recipient."""

    session: bytes
    client_id: int
    shares: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True)
class ShareBundle:
    """Server -> one client: (sender id, ciphertext) of every ciphertext addressed to `recipient`."""

    session: bytes
    recipient: int
    shares: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True)
class MaskedInput:
    """Client -> server: the quantized update plus self-mask and pairwise masks, a uint32 vector."""

    session: bytes
    client_id: int
    masked: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True)
class UnmaskRequest:
    """Server -> surviving clients: who delivered a masked input (survivors) and who did not (dropped)."""

    session: bytes
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Client -> server: (owner id, share bytes) of b_owner for survivors and of s_sk_owner for dropped owners."""

    session: bytes
    client_id: int
    self_mask_shares: tuple[tuple[int, bytes], ...]
    key_shares: tuple[tuple[int, bytes], ...]
