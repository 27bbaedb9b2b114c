"""Checks both halves of a `dh`-style round apply to what they receive: config, id lists, vectors, sizes.

Separate so that the client and server state machines share one definition of a well-formed message.
"""

from __future__ import annotations

import numpy as np

from .errors import ProtocolError
from .keys import AEAD_TAG_BYTES, SHARE_PLAINTEXT_HEADER
from .keys import client_id as _client_id
from .round import RoundConfig
from .shamir import SHARE_BYTES

SHARE_PAYLOAD_BYTES = 2 * SHARE_BYTES  # a share of b_u, then a share of s_sk_u
CIPHERTEXT_BYTES = SHARE_PLAINTEXT_HEADER + SHARE_PAYLOAD_BYTES + AEAD_TAG_BYTES  # 112


def _check_vector(vector: object, length: int, what: str) -> np.ndarray:
    if not isinstance(vector, np.ndarray) or vector.dtype != np.uint32:
        raise ProtocolError(f"{what} must be a numpy uint32 vector")
    if vector.shape != (length,):
        raise ProtocolError(f"{what} has shape {vector.shape}, expected ({length},)")
    return vector


def _sorted_ids(items, what: str, pairs: bool = False) -> tuple[int, ...]:
    """Client ids of an id list, or of (id, bytes) pairs; ProtocolError unless strictly increasing."""
    try:
        if pairs and any(not isinstance(x, tuple) or len(x) != 2 or not isinstance(x[1], bytes) for x in items):
            raise ValueError("expected (client id, bytes) pairs")
        ids = tuple(_client_id(x[0] if pairs else x) for x in items)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"{what}: malformed entry ({exc})") from None
    if len(set(ids)) != len(ids):
        raise ProtocolError(f"{what} lists a client more than once")
    if list(ids) != sorted(ids):
        raise ProtocolError(f"{what} is not sorted by client id")
    return ids


def _check_config(config: object) -> RoundConfig:
    if not isinstance(config, RoundConfig):
        raise TypeError(f"expected a secagg.RoundConfig, got {type(config).__name__} (see secagg.make_round)")
    return config
