"""Secure aggregation with dropout recovery (Bonawitz et al., CCS 2017): the `dh` protocol.

Each client u holds two fresh X25519 pairs per round, (c_sk, c_pk) for share transport and (s_sk, s_pk)
for masks, and a fresh self-mask seed b_u. With N(u) its neighbours (all other participants here; a
k-regular graph for SecAgg+, see secagg/secaggplus.py and secagg/round.py):

    y_u = q_u + PRG(b_u) + sum_{v in N(u) ∩ U2, v > u} PRG(s_uv) - sum_{v in N(u) ∩ U2, v < u} PRG(s_uv)

over Z_2^32, where s_uv = HKDF(X25519(s_sk_u, s_pk_v)) and U2 is the set of clients that sent shares.
b_u and s_sk_u are Shamir-shared t-of-|N(u)|+1 (x = id + 1) among u and its neighbours, each share pair
encrypted to its holder. After the masked inputs (survivors U3), each surviving client reveals its share of
b_w for survivors w and of s_sk_w for dropped w (never both for one w), and the server

    sum_{u in U3} y_u - sum_{u in U3} PRG(b_u) -/+ PRG(s_uv) for dropped u in U2 \\ U3 and survivors v in N(u)

is exactly sum_{u in U3} q_u. Below t the round aborts (RoundAborted) before anything is revealed.

Bytes per client and round (full graph, n clients, vector length L, ids < 2^14, measured from fl.wire):
up about 112 (AdvertiseKeys) + 114 (n - 1) (ShareKeys: 112-byte ciphertext + id each) + 4 L + 45
(MaskedInput) + 46 n + 40 (UnmaskResponse: a 44-byte share + id per owner); down about 74 n (KeyRoster)
+ 114 (n - 1) (ShareBundle) + 2 n (UnmaskRequest). With a k-regular graph, replace n - 1 by k in the
ShareKeys, ShareBundle and UnmaskResponse terms.
"""

from __future__ import annotations

import os

import numpy as np

from . import shamir
from .errors import ProtocolError, RoundAborted
from .keys import (
    AEAD_TAG_BYTES,
    PUBLIC_KEY_BYTES,
    SHARE_PLAINTEXT_HEADER,
    client_id as _client_id,
    decrypt_shares,
    encrypt_shares,
    generate_keypair,
    pairwise_seed,
    private_bytes,
    private_from_bytes,
    public_bytes,
    transport_keys,
)
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
from .registry import register
from .round import RoundConfig
from .shamir import SHARE_BYTES, ShareError

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


class Client:
    """One client's side of a round. Each step runs once, in order; any failed check ends the client's round.

    1. advertise(): two fresh X25519 pairs (c: share transport, s: masks) -> AdvertiseKeys.
    2. share_keys(roster): check the roster (session, this client's keys, no duplicate or malformed
       keys, at least t clients); derive transport keys and mask seeds with every neighbour in it; draw
       the self-mask seed b_u; Shamir-share b_u and s_sk_u among itself and those neighbours; encrypt
       each neighbour's pair of shares -> ShareKeys.
    3. masked_input(bundle, q): decrypt and check the shares addressed to this client (AEAD, sender and
       recipient ids); y = q + PRG(b_u) +- PRG(s_uv) for each neighbour v that sent shares -> MaskedInput.
    4. unmask(request): check that survivors and dropped are disjoint, account exactly for the clients that
       sent shares here, list this client as a survivor and count at least t (in its neighbourhood);
       reveal shares of b_w for survivors w, of s_sk_w for dropped w -> UnmaskResponse.
    """

    def __init__(self, config: RoundConfig, client_id: int) -> None:
        self.config = _check_config(config)
        self.client_id = _client_id(client_id)
        self._neighbours = frozenset(config.neighbours(self.client_id))  # ValueError if not a participant
        self._state = "new"  # new -> advertised -> shared -> masked -> unmasked; failed on any error

    # --- 1 ------------------------------------------------------------------------------------
    def advertise(self) -> AdvertiseKeys:
        self._begin("new", "advertise")
        self._c_sk, c_pk = generate_keypair()
        self._s_sk, s_pk = generate_keypair()
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
        peers = [v for v in entries if v in self._neighbours]
        if len(peers) + 1 < cfg.threshold:  # fewer than t participants (in this client's neighbourhood)
            raise RoundAborted(f"roster lists {len(peers) + 1} clients of client {me}'s group, fewer than "
                               f"t={cfg.threshold}", missing=set(self._neighbours) - set(peers))
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
        if any(not isinstance(k, bytes) or len(k) != PUBLIC_KEY_BYTES for k in keys):
            raise ProtocolError(f"roster holds a malformed public key (expected {PUBLIC_KEY_BYTES} bytes)")
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
            raise ProtocolError(f"{what} belongs to a different session")


class Server:
    """The server's side of a round; aggregates as masked inputs arrive, never holding all of them.

    1. receive_keys(AdvertiseKeys) per client; roster() -> KeyRoster of U1 (RoundAborted if |U1| < t).
    2. receive_shares(ShareKeys) per client; bundles() -> one ShareBundle per client of U2 (the senders).
    3. add(MaskedInput): checked, then summed into one uint32 accumulator at once.
       unmask_request() -> UnmaskRequest with survivors U3 (inputs that arrived) and dropped U2 \\ U3.
    4. receive_unmask(UnmaskResponse) per survivor; result(): rebuild b_u for u in U3 and s_sk_u for
       dropped u, check each key against its advertised s_pk, remove the self-masks and the dropped
       clients' pairwise masks -> exactly sum_{u in U3} q_u.
    Below t at any step: RoundAborted and nothing is revealed. A message that fails a check raises
    ProtocolError and is not applied; the round goes on without it.
    Accounting: dropped_by_step (who of the previous step did not deliver), survivors (U3), late_ignored
    (masked inputs that arrived after the unmask request, ignored).
    """

    def __init__(self, config: RoundConfig) -> None:
        self.config = _check_config(config)
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._shares: dict[int, dict[int, bytes]] = {}
        self._received: set[int] = set()
        self._responses: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._roster: KeyRoster | None = None
        self._bundles: dict[int, ShareBundle] | None = None
        self._request: UnmaskRequest | None = None
        self._result: np.ndarray | None = None
        self._sum: np.ndarray | None = None
        self.dropped_by_step: dict[str, list[int]] = {"share_keys": [], "masked_input": [], "unmask": []}
        self.survivors: tuple[int, ...] = ()
        self.late_ignored = 0
        self._state = "keys"  # keys -> shares -> inputs -> unmask -> done, or aborted

    # --- 1 ------------------------------------------------------------------------------------
    def receive_keys(self, msg: AdvertiseKeys) -> None:
        self._expect("keys", "advertised keys")
        cid = self._check_sender(msg.session, msg.client_id, self.config.participants, "is not a participant")
        if cid in self._keys:
            raise ProtocolError(f"client {cid} advertised keys twice")
        keys = (msg.cipher_public_key, msg.mask_public_key)
        if any(not isinstance(k, bytes) or len(k) != PUBLIC_KEY_BYTES for k in keys):
            raise ProtocolError(f"client {cid} sent a malformed public key")
        if keys[0] == keys[1]:
            raise ProtocolError(f"client {cid} sent the same public key twice")
        taken = {k for pair in self._keys.values() for k in pair}
        if taken.intersection(keys):
            raise ProtocolError(f"client {cid} sent a public key another client already sent")
        self._keys[cid] = keys

    def roster(self) -> KeyRoster:
        if self._roster is None:
            self._expect("keys", "roster request")
            u1 = sorted(self._keys)
            self._abort_below(u1, "advertised keys", set(self.config.participants) - set(u1))
            self._roster = KeyRoster(session=self.config.session,
                                     keys=tuple((cid, *self._keys[cid]) for cid in u1))
            self._state = "shares"
        return self._roster

    # --- 2 ------------------------------------------------------------------------------------
    def receive_shares(self, msg: ShareKeys) -> None:
        self._expect("shares", "share keys")
        cid = self._check_sender(msg.session, msg.client_id, self._keys, "did not advertise keys (not in U1)")
        if cid in self._shares:
            raise ProtocolError(f"client {cid} sent its shares twice")
        recipients = _sorted_ids(msg.shares, f"shares of client {cid}", pairs=True)
        expected = [v for v in self.config.neighbours(cid) if v in self._keys]
        if list(recipients) != expected:
            raise ProtocolError(f"client {cid} sent shares to {list(recipients)}, expected its neighbours in the "
                                f"roster {expected}")
        if any(not isinstance(ct, bytes) or len(ct) != CIPHERTEXT_BYTES for _, ct in msg.shares):
            raise ProtocolError(f"client {cid} sent a share ciphertext that is not {CIPHERTEXT_BYTES} bytes")
        self._shares[cid] = dict(msg.shares)

    def bundles(self) -> dict[int, ShareBundle]:
        if self._bundles is None:
            self._expect("shares", "bundles request")
            u2 = sorted(self._shares)
            self.dropped_by_step["share_keys"] = sorted(set(self._keys) - set(u2))
            self._abort_below(u2, "shares", self.dropped_by_step["share_keys"])
            sent = self._shares
            self._bundles = {
                v: ShareBundle(session=self.config.session, recipient=v,
                               shares=tuple((u, sent[u][v]) for u in self.config.neighbours(v) if u in sent))
                for v in u2
            }
            self._shares = {u: {} for u in u2}  # the ciphertexts are forwarded; keep only who sent
            self._sum = np.zeros(self.config.length, dtype=np.uint32)
            self._state = "inputs"
        return self._bundles

    # --- 3 ------------------------------------------------------------------------------------
    def add(self, msg: MaskedInput) -> None:
        if self._state not in ("inputs", "unmask", "done"):
            raise ProtocolError(f"unexpected masked input: the round is in state {self._state!r}")
        cid = self._check_sender(msg.session, msg.client_id, self._shares, "sent no shares (not in U2)")
        if cid in self._received:
            raise ProtocolError(f"client {cid} sent its masked input twice")
        if self._state != "inputs":  # already declared dropped: its masks are being recovered instead
            self.late_ignored += 1
            return
        vector = _check_vector(msg.masked, self.config.length, f"masked input of client {cid}")
        self._sum += vector
        self._received.add(cid)

    def unmask_request(self) -> UnmaskRequest:
        if self._request is None:
            self._expect("inputs", "unmask request")
            u3 = sorted(self._received)
            dropped = sorted(set(self._shares) - self._received)
            self.dropped_by_step["masked_input"] = dropped
            self.survivors = tuple(u3)
            self._abort_below(u3, "masked input", dropped)
            self._request = UnmaskRequest(session=self.config.session, survivors=tuple(u3), dropped=tuple(dropped))
            self._state = "unmask"
        return self._request

    # --- 4 ------------------------------------------------------------------------------------
    def receive_unmask(self, msg: UnmaskResponse) -> None:
        self._expect("unmask", "unmask response")
        cfg = self.config
        cid = self._check_sender(msg.session, msg.client_id, self._received, "is not a survivor (not in U3)")
        if cid in self._responses:
            raise ProtocolError(f"client {cid} sent its unmask response twice")
        group = set(cfg.neighbours(cid)) | {cid}
        parts = []
        for entries, owners, what in ((msg.self_mask_shares, self._request.survivors, "self-mask shares"),
                                      (msg.key_shares, self._request.dropped, "key shares")):
            ids = _sorted_ids(entries, f"{what} of client {cid}", pairs=True)
            expected = [w for w in owners if w in group]
            if list(ids) != expected:
                raise ProtocolError(f"client {cid} sent {what} for {list(ids)}, expected {expected}")
            try:
                values = shamir.many_from_bytes([share for _, share in entries])
            except ShareError as exc:
                raise ProtocolError(f"{what} of client {cid}: {exc}") from None
            parts += [np.asarray(ids, dtype=np.int64), values]
        self._responses[cid] = tuple(parts)

    def result(self) -> np.ndarray:
        if self._result is not None:
            return self._result.copy()
        self._expect("unmask", "result request")
        cfg = self.config
        survivors, dropped = self._request.survivors, self._request.dropped
        responders = sorted(self._responses)
        self.dropped_by_step["unmask"] = sorted(set(survivors) - set(responders))
        alive = set(survivors)
        # the secrets to rebuild: b_u of every survivor, s_sk_u of every dropped u with a surviving neighbour
        need_b = {u: self._holders(u, responders) for u in survivors}
        mask_partners = {u: [v for v in cfg.neighbours(u) if v in alive] for u in dropped}
        need_sk = {u: self._holders(u, responders) for u, partners in mask_partners.items() if partners}
        short = sorted(u for u, holders in [*need_b.items(), *need_sk.items()] if len(holders) < cfg.threshold)
        if short:
            self._state = "aborted"
            raise RoundAborted(f"round aborted: fewer than t={cfg.threshold} unmask responses hold shares of the "
                               f"secrets of clients {short}", missing=self.dropped_by_step["unmask"])
        b = self._rebuild(need_b, part=0)
        sk = self._rebuild(need_sk, part=2)
        total = self._sum
        scratch = scratch_for(cfg.length)
        for u in survivors:
            add_prg(total, b[u], subtract=True, scratch=scratch)
        for u, raw in sk.items():
            key = private_from_bytes(raw)
            if public_bytes(key) != self._keys[u][1]:
                self._state = "aborted"
                raise RoundAborted(f"round aborted: the rebuilt mask key of client {u} does not match the public "
                                   "key it advertised (forged or inconsistent shares)")
            for v in mask_partners[u]:  # v added +PRG(s_uv) if u > v, -PRG(s_uv) if u < v: undo it
                seed = pairwise_seed(key, self._keys[v][1], cfg.session, u, v)
                add_prg(total, seed, subtract=u > v, scratch=scratch)
        self._result = total
        self._sum = None
        self._state = "done"
        return total.copy()

    def _holders(self, u: int, responders: list[int]) -> list[int]:
        """The responders that hold shares of u's secrets (u itself and its neighbours), sorted."""
        if self.config.full_graph:
            return responders
        group = set(self.config.neighbours(u)) | {u}
        return [v for v in responders if v in group]

    def _rebuild(self, need: dict[int, list[int]], part: int) -> dict[int, bytes]:
        """Rebuild each owner's secret from its first t holders; owners with the same holders share one basis."""
        t = self.config.threshold
        groups: dict[tuple[int, ...], list[int]] = {}
        for owner, holders in need.items():
            groups.setdefault(tuple(holders[:t]), []).append(owner)
        out = {}
        for holders, owners in groups.items():
            wanted = np.asarray(owners, dtype=np.int64)
            stacked = []
            for v in holders:
                ids, values = self._responses[v][part], self._responses[v][part + 1]
                stacked.append(values[np.searchsorted(ids, wanted)])
            secrets = shamir.reconstruct([v + 1 for v in holders], np.stack(stacked))
            for owner, value in zip(owners, secrets):
                try:
                    out[owner] = shamir.field_to_secret(value)
                except ShareError as exc:
                    self._state = "aborted"
                    raise RoundAborted(f"round aborted: secret of client {owner}: {exc}") from None
        return out

    # --- checks ---------------------------------------------------------------------------------
    def _expect(self, state: str, what: str) -> None:
        if self._state != state:
            raise ProtocolError(f"unexpected {what}: the round is in state {self._state!r}")

    def _check_sender(self, session: bytes, cid: object, known, problem: str) -> int:
        if session != self.config.session:
            raise ProtocolError(f"message from client {cid} belongs to a different session")
        try:
            cid = _client_id(cid)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        if cid not in known:
            raise ProtocolError(f"client {cid} {problem}")
        return cid

    def _abort_below(self, delivered, what: str, missing) -> None:
        if len(delivered) < self.config.threshold:
            self._state = "aborted"
            raise RoundAborted(f"round aborted: {len(delivered)} clients sent {what}, fewer than "
                               f"t={self.config.threshold}; missing {sorted(missing)}", missing=missing)


class SecAggProtocol:
    """Bonawitz et al. secure aggregation over the full graph: exact sums while >= t clients remain."""

    name = "dh"
    masks = True
    full_graph = True
    Client = Client
    Server = Server


DHProtocol = SecAggProtocol  # the seed framework's name

register("dh", SecAggProtocol, aliases=("DHProtocol",))
