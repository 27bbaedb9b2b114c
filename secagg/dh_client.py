"""The client's state machine of a `dh`-style round (Bonawitz et al. 2017; SecAgg+ runs it over a sparse graph).

Separate from the server's half so each role reads on its own; the protocol and its byte counts are in `dh`.
"""

from __future__ import annotations

import os

import numpy as np

from . import shamir
from .dh_checks import SHARE_PAYLOAD_BYTES, _check_config, _check_vector, _sorted_ids
from .errors import ProtocolError, RoundAborted
from .graph import Graph
from .keys import (
    decrypt_shares,
    encrypt_shares,
    generate_keypair,
    key_problem,
    pairwise_seed,
    private_bytes,
    transport_keys,
)
from .keys import client_id as _client_id
from .messages import (
    AdvertiseKeys,
    KeyRoster,
    MaskedInput,
    ShareBundle,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
)
from .prg import add_prg, scratch_for
from .round import RoundConfig
from .shamir import SHARE_BYTES, ShareError


class Client:
    """One client's side of a round. Each step runs once, in order; any failed check ends the client's round.

    1. advertise(): two fresh X25519 pairs (c: share transport, s: masks) -> AdvertiseKeys.
    2. share_keys(roster): check the roster (session, participants only, this client's keys, no key twice
       byte for byte, no malformed or non-canonical key, at least t clients); derive the graph from it
       (config.graph); derive transport keys and mask seeds with every neighbour (a neighbour's low-order key
       fails that agreement; a non-neighbour's is never used, and the server refuses it by class at advertise);
       draw the self-mask seed b_u;
       Shamir-share b_u and s_sk_u among itself and its neighbours; encrypt each neighbour's pair of
       shares -> ShareKeys.
    3. masked_input(bundle, q): decrypt and check the shares addressed to this client (AEAD, sender and
       recipient ids; RoundAborted if with itself fewer than t sent them); y = q + PRG(b_u) +- PRG(s_uv) for
       each neighbour v that sent shares -> MaskedInput.
    4. unmask(request): check that survivors and dropped are disjoint, lie in the roster, account exactly
       for the clients that sent shares here, list this client as a survivor, count at least t (in its
       neighbourhood) and are connected in the graph (else RoundAborted: a part's sum would be exposed);
       reveal shares of b_w for survivors w, of s_sk_w for dropped w -> UnmaskResponse.
    """

    def __init__(self, config: RoundConfig, client_id: int, *, key_seed: bytes | None = None) -> None:
        """`key_seed`: derive this round's two key pairs from it (simulation only; see generate_keypair)."""
        self.config = _check_config(config)
        if key_seed is not None and not isinstance(key_seed, bytes):  # not at advertise, after the round began
            raise TypeError(f"key_seed must be bytes or None, got {type(key_seed).__name__}")
        self._key_seed = key_seed
        self.client_id = _client_id(client_id)
        config.check_participant(self.client_id)  # ValueError if not
        self.graph: Graph | None = None  # drawn from the roster at share_keys
        self._state = "new"  # new -> advertised -> shared -> masked -> unmasked; failed on any error

    # --- 1 ------------------------------------------------------------------------------------
    def advertise(self) -> AdvertiseKeys:
        self._begin("new", "advertise")
        seeds = (None, None) if self._key_seed is None else (self._key_seed + b"/c", self._key_seed + b"/s")
        self._c_sk, c_pk = generate_keypair(seeds[0])
        self._s_sk, s_pk = generate_keypair(seeds[1])
        self._own_keys = (c_pk, s_pk)
        self._state = "advertised"
        return AdvertiseKeys(session=self.config.session, client_id=self.client_id, cipher_public_key=c_pk,
                             mask_public_key=s_pk)

    # --- 2 ------------------------------------------------------------------------------------
    def share_keys(self, roster: KeyRoster) -> ShareKeys:
        self._begin("advertised", "share_keys")
        cfg, me = self.config, self.client_id
        self._check_session(roster.session, "roster")
        entries = self._check_roster(roster)
        if len(entries) < cfg.threshold:
            raise RoundAborted(f"roster lists {len(entries)} clients, fewer than t={cfg.threshold}",
                               missing=set(cfg.participants) - set(entries))
        self.graph = cfg.graph(roster)
        peers = list(self.graph.neighbours(me))
        self._neighbours = frozenset(peers)
        send, self._recv_keys, self._mask_seeds = {}, {}, {}
        for v in peers:  # ProtocolError on a malformed (e.g. low-order) key, before anything is shared
            c_pk, s_pk = entries[v]
            send[v], self._recv_keys[v] = transport_keys(self._c_sk, c_pk, cfg.session, me, v)
            self._mask_seeds[v] = pairwise_seed(self._s_sk, s_pk, cfg.session, me, v)
        self._b = os.urandom(shamir.SECRET_BYTES)
        holders = sorted([*peers, me])
        shares = shamir.share([self._b, private_bytes(self._s_sk)], [h + 1 for h in holders], cfg.threshold)
        payloads = shares.reshape(len(holders), -1).astype("<u4")
        out = []
        for v, payload in zip(holders, payloads):
            raw = payload.tobytes()
            if v == me:
                self._held = {me: (raw[:SHARE_BYTES], raw[SHARE_BYTES:])}
            else:
                out.append((v, encrypt_shares(send[v], cfg.session, me, v, raw)))
        self._c_sk = self._s_sk = None  # their work is done (s_sk lives on only as shares)
        self._state = "shared"
        return ShareKeys(session=cfg.session, client_id=me, shares=tuple(out))

    def _check_roster(self, roster: KeyRoster) -> dict[int, tuple[bytes, bytes]]:
        cfg, me = self.config, self.client_id
        try:
            entries = [(e[0], e[1], e[2]) for e in roster.keys if len(e) == 3]
            if len(entries) != len(roster.keys):
                raise ValueError("an entry is not (id, c_pk, s_pk)")
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed roster: {exc}") from None
        ids = _sorted_ids([cid for cid, _, _ in entries], "roster")
        strangers = sorted(set(ids) - set(cfg.participants))
        if strangers:
            raise ProtocolError(f"roster lists clients {strangers} that are not participants of this round")
        keys = [k for _, c, s in entries for k in (c, s)]
        for key in keys:  # bytes only: a neighbour's low-order key is refused by the agreement in share_keys
            problem = key_problem(key)
            if problem:
                raise ProtocolError(f"roster holds a {problem}")
        if len(set(keys)) != len(keys):
            raise ProtocolError("roster lists the same public key twice")
        table = {cid: (c, s) for cid, (_, c, s) in zip(ids, entries)}
        if me not in table:
            raise ProtocolError(f"roster does not list client {me}")
        if table[me] != self._own_keys:
            raise ProtocolError(f"roster does not carry the keys client {me} advertised")
        return table

    # --- 3 ------------------------------------------------------------------------------------
    def masked_input(self, bundle: ShareBundle, vector: np.ndarray) -> MaskedInput:
        self._begin("shared", "masked_input")
        cfg, me = self.config, self.client_id
        self._check_session(bundle.session, "share bundle")
        if bundle.recipient != me:
            raise ProtocolError(f"share bundle is addressed to client {bundle.recipient}, not {me}")
        senders = _sorted_ids(bundle.shares, "share bundle", pairs=True)
        unknown = sorted(set(senders) - set(self._recv_keys))
        if unknown:
            raise ProtocolError(f"share bundle holds shares from {unknown}, not neighbours of client {me} "
                                "in the roster")
        if len(senders) + 1 < cfg.threshold:
            raise RoundAborted(f"only {len(senders)} neighbours of client {me} sent shares; with it, fewer than "
                               f"t={cfg.threshold}")
        vector = _check_vector(vector, cfg.length, "input vector")
        for v, (_, ciphertext) in zip(senders, bundle.shares):
            payload = decrypt_shares(self._recv_keys[v], cfg.session, v, me, ciphertext)
            if len(payload) != SHARE_PAYLOAD_BYTES:
                raise ProtocolError(f"share from client {v} has {len(payload)} bytes, expected {SHARE_PAYLOAD_BYTES}")
            try:
                shamir.many_from_bytes([payload[:SHARE_BYTES], payload[SHARE_BYTES:]])
            except ShareError as exc:
                raise ProtocolError(f"share from client {v}: {exc}") from None
            self._held[v] = (payload[:SHARE_BYTES], payload[SHARE_BYTES:])
        masked = vector.copy()
        scratch = scratch_for(cfg.length)
        add_prg(masked, self._b, scratch=scratch)
        for v in senders:  # + for peers above, - for peers below: each pair's masks cancel in the sum
            add_prg(masked, self._mask_seeds[v], subtract=v < me, scratch=scratch)
        self._view = frozenset(senders) | {me}  # U2 as this client can see it
        self._b = self._mask_seeds = self._recv_keys = None
        self._state = "masked"
        return MaskedInput(session=cfg.session, client_id=me, masked=masked)

    # --- 4 ------------------------------------------------------------------------------------
    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        self._begin("masked", "unmask")
        cfg, me = self.config, self.client_id
        self._check_session(request.session, "unmask request")
        survivors = _sorted_ids(request.survivors, "survivor list")
        dropped = _sorted_ids(request.dropped, "dropped list")
        both = sorted(set(survivors) & set(dropped))
        if both:
            raise ProtocolError(f"unmask request asks for both shares of clients {both}")
        if me in dropped or me not in survivors:
            raise ProtocolError(f"unmask request does not list client {me} as a survivor")
        listed = set(survivors) | set(dropped)
        strangers = sorted(listed - set(cfg.participants))
        if strangers:
            raise ProtocolError(f"unmask request lists clients {strangers} that are not participants")
        absent = sorted(listed - set(self.graph.nodes))
        if absent:
            raise ProtocolError(f"unmask request lists clients {absent} that are not in the roster")
        group = self._neighbours | {me}
        not_sent = sorted((listed & group) - self._view)
        if not_sent:
            raise ProtocolError(f"unmask request lists clients {not_sent} that sent no shares to client {me}: "
                                "not a subset of the clients that sent shares")
        unaccounted = sorted(self._view - listed)
        if unaccounted:
            raise ProtocolError(f"unmask request lists clients {unaccounted} as neither survivor nor dropped")
        alive = len(group.intersection(survivors))
        if alive < cfg.threshold:
            raise RoundAborted(f"unmask request lists {alive} survivors among client {me}'s group, fewer than "
                               f"t={cfg.threshold}: no shares revealed")
        parts = self.graph.components(survivors)
        if len(parts) > 1:
            raise RoundAborted(f"survivors are not connected in the neighbour graph ({len(parts)} parts, sizes "
                               f"{[len(p) for p in parts]}): a part's sum would be exposed; no shares revealed")
        held = self._held
        self._held = None
        self._state = "unmasked"
        return UnmaskResponse(
            session=cfg.session, client_id=me,
            self_mask_shares=tuple((w, held[w][0]) for w in survivors if w in held),
            key_shares=tuple((w, held[w][1]) for w in dropped if w in held),
        )

    # --- checks ---------------------------------------------------------------------------------
    def _begin(self, expected: str, step: str) -> None:
        if self._state != expected:
            raise ProtocolError(f"client {self.client_id}: {step}() out of order (state {self._state!r}); "
                                "each step runs once per round, in order")
        self._state = "failed"  # until the step succeeds: a failed step is never retried with other input

    def _check_session(self, session: bytes, what: str) -> None:
        if session != self.config.session:
            raise ProtocolError(f"{what} belongs to a different session (another run, round, cohort, "
                                "configuration or server nonce: a replay)")
