"""Pairwise Diffie-Hellman masking (the pairwise half of Bonawitz et al. 2017).

Each pair u < v derives a shared seed s_uv (X25519 + HKDF salted with the session id). Client u sends

    y_u = q_u + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv)   (mod 2^32)

so every mask appears once with + and once with -, and the server's sum of all y_u is exactly the
sum of the q_u. A single y_u is uniformly random to anyone without u's seeds.

Without self-masks and secret shares, a missing client's masks cannot be removed: a client that
does not deliver makes the round abort (RoundAborted), never yield a wrong sum. Dropout recovery
(double masking with Shamir shares) arrives with the next protocol; the explicit `_state` of both
state machines is where its share-keys and unmask steps slot in.

Bytes per client: 32 (public key) up, 32 * n down (roster), 4 * length up (masked input),
plus the session id and client ids the wire adds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import ProtocolError, RoundAborted
from .keys import PUBLIC_KEY_BYTES, client_id as _client_id, generate_keypair, pairwise_seed
from .messages import AdvertiseKeys, KeyRoster, MaskedInput
from .prg import prg_uint32
from .registry import register

SESSION_BYTES = 32


def _check_session(session: bytes) -> bytes:
    if not isinstance(session, bytes) or len(session) != SESSION_BYTES:
        raise ValueError(f"session must be {SESSION_BYTES} bytes (see secagg.session_id)")
    return session


def _check_participants(participants: Sequence[int]) -> tuple[int, ...]:
    ids = [_client_id(p) for p in participants]
    if len(set(ids)) != len(ids):
        raise ValueError("participants contain duplicate client ids")
    if len(ids) < 2:
        # With one participant the "sum" is that client's input: nothing to hide it in.
        raise ValueError(f"secure aggregation needs at least 2 participants, got {len(ids)}")
    return tuple(sorted(ids))


def _check_length(length: int) -> int:
    if int(length) != length or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}")
    return int(length)


def _check_vector(vector: object, length: int, what: str) -> np.ndarray:
    if not isinstance(vector, np.ndarray) or vector.dtype != np.uint32:
        raise ProtocolError(f"{what} must be a numpy uint32 vector")
    if vector.shape != (length,):
        raise ProtocolError(f"{what} has shape {vector.shape}, expected ({length},)")
    return vector


class DHClient:
    """One client's side of a pairwise-masked round.

    1. advertise(): generate a fresh X25519 key pair for this round -> AdvertiseKeys.
    2. mask(roster, q): check the roster against the session and participant set, derive a seed
       with every peer, add PRG(s_uv) for peers v above and subtract it for peers below -> MaskedInput.
       The private key is dropped afterwards; each state machine serves one round only.
    """

    def __init__(self, client_id: int, session: bytes, participants: Sequence[int], length: int) -> None:
        self.client_id = _client_id(client_id)
        self.session = _check_session(session)
        self.participants = _check_participants(participants)
        if self.client_id not in self.participants:
            raise ValueError(f"client {self.client_id} is not among the participants")
        self.length = _check_length(length)
        self._private_key = None
        self._public_key: bytes | None = None
        self._state = "new"  # new -> advertised -> masked

    def advertise(self) -> AdvertiseKeys:
        if self._state != "new":
            raise ProtocolError(f"client {self.client_id} already advertised keys this round")
        self._private_key, self._public_key = generate_keypair()
        self._state = "advertised"
        return AdvertiseKeys(session=self.session, client_id=self.client_id, public_key=self._public_key)

    def mask(self, roster: KeyRoster, vector: np.ndarray) -> MaskedInput:
        if self._state == "new":
            raise ProtocolError(f"client {self.client_id}: mask() before advertise()")
        if self._state != "advertised":
            raise ProtocolError(f"client {self.client_id}: mask() may be called only once per round")
        self._state = "masked"  # set first: a failed call must not be retried with another roster
        try:
            peers = self._check_roster(roster)
            masked = _check_vector(vector, self.length, "input vector").copy()
            for peer, peer_key in peers:
                seed = pairwise_seed(self._private_key, peer_key, self.session, self.client_id, peer)
                if peer > self.client_id:
                    masked += prg_uint32(seed, self.length)
                else:
                    masked -= prg_uint32(seed, self.length)
        finally:
            self._private_key = None
        return MaskedInput(session=self.session, client_id=self.client_id, masked=masked)

    def _check_roster(self, roster: KeyRoster) -> list[tuple[int, bytes]]:
        """The (peer id, public key) pairs of a roster that fits this round exactly; else ProtocolError."""
        if roster.session != self.session:
            raise ProtocolError("roster belongs to a different session")
        try:
            entries = [(_client_id(cid), key) for cid, key in roster.public_keys]
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed roster entry: {exc}") from exc
        ids = [cid for cid, _ in entries]
        if len(set(ids)) != len(ids):
            raise ProtocolError("roster lists a client id more than once")
        if set(ids) != set(self.participants):
            missing = sorted(set(self.participants) - set(ids))
            unexpected = sorted(set(ids) - set(self.participants))
            raise ProtocolError(f"roster does not match the participants: missing {missing}, unexpected {unexpected}")
        keys = [key for _, key in entries]
        if any(not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES for key in keys):
            raise ProtocolError(f"roster holds a malformed public key (expected {PUBLIC_KEY_BYTES} bytes)")
        if len(set(keys)) != len(keys):
            raise ProtocolError("roster lists the same public key for two clients")
        if dict(entries)[self.client_id] != self._public_key:
            raise ProtocolError(f"roster does not carry the public key client {self.client_id} advertised")
        return [(cid, key) for cid, key in entries if cid != self.client_id]


class DHServer:
    """The server's side of a pairwise-masked round.

    1. receive_keys(msg) for each client; roster() broadcasts them once all participants advertised.
    2. add(msg) for each masked input: checked, then summed into a running uint32 total at once
       (the server never holds all vectors).
    3. result(): the exact field sum of all quantized inputs, once every participant delivered.
    A missing client at step 1 or 3 raises RoundAborted naming it; the round is then over.
    """

    def __init__(self, session: bytes, participants: Sequence[int], length: int) -> None:
        self.session = _check_session(session)
        self.participants = _check_participants(participants)
        self.length = _check_length(length)
        self._keys: dict[int, bytes] = {}
        self._received: set[int] = set()
        self._sum = np.zeros(self.length, dtype=np.uint32)
        self._roster: KeyRoster | None = None
        self._state = "keys"  # keys -> inputs -> done, or aborted

    def receive_keys(self, msg: AdvertiseKeys) -> None:
        self._expect("keys", "advertised keys")
        self._check_sender(msg.session, msg.client_id)
        if msg.client_id in self._keys:
            raise ProtocolError(f"client {msg.client_id} advertised keys twice")
        if not isinstance(msg.public_key, bytes) or len(msg.public_key) != PUBLIC_KEY_BYTES:
            raise ProtocolError(f"client {msg.client_id} sent a malformed public key")
        if msg.public_key in self._keys.values():
            raise ProtocolError(f"client {msg.client_id} sent a public key another client already sent")
        self._keys[msg.client_id] = msg.public_key

    def roster(self) -> KeyRoster:
        if self._roster is None:
            self._expect("keys", "roster request")
            self._abort_if_missing(set(self._keys), "advertised keys")
            self._roster = KeyRoster(session=self.session, public_keys=tuple(sorted(self._keys.items())))
            self._state = "inputs"
        return self._roster

    def add(self, msg: MaskedInput) -> None:
        self._expect("inputs", "masked input")
        self._check_sender(msg.session, msg.client_id)
        if msg.client_id in self._received:
            raise ProtocolError(f"client {msg.client_id} sent its masked input twice")
        vector = _check_vector(msg.masked, self.length, f"masked input of client {msg.client_id}")
        self._sum += vector
        self._received.add(msg.client_id)

    def result(self) -> np.ndarray:
        self._expect("inputs", "result request")
        self._abort_if_missing(self._received, "masked input")
        self._state = "done"
        return self._sum.copy()

    def _expect(self, state: str, what: str) -> None:
        if self._state != state:
            raise ProtocolError(f"unexpected {what}: the round is in state {self._state!r}")

    def _check_sender(self, session: bytes, cid: int) -> None:
        if session != self.session:
            raise ProtocolError(f"message from client {cid} belongs to a different session")
        if cid not in self.participants:
            raise ProtocolError(f"client {cid} is not a participant of this round")

    def _abort_if_missing(self, delivered: set[int], what: str) -> None:
        missing = sorted(set(self.participants) - delivered)
        if missing:
            self._state = "aborted"
            raise RoundAborted(f"round aborted: no {what} from clients {missing}", missing=missing)


class DHProtocol:
    """Pairwise DH masking: exact sums, no dropout tolerance."""

    name = "dh"
    masks = True
    Client = DHClient
    Server = DHServer


register("dh", DHProtocol, aliases=("DHProtocol",))
