"""Messages of one masked round, as plain frozen dataclasses.

The state machines take and return these; fl/wire.py turns them into bytes and back (and validates).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class AdvertiseKeys:
    """Client -> server: this client's fresh public key for the round."""

    session: bytes
    client_id: int
    public_key: bytes


@dataclass(frozen=True)
class KeyRoster:
    """Server -> all clients: every advertised public key, as (client id, key) sorted by client id."""

    session: bytes
    public_keys: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True)
class MaskedInput:
    """Client -> server: the quantized update plus pairwise masks, a uint32 vector."""

    session: bytes
    client_id: int
    masked: np.ndarray = field(compare=False, repr=False)
