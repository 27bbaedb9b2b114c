"""The server's state machine of a `dh`-style round (Bonawitz et al. 2017; SecAgg+ runs it over a sparse graph).

Separate from the client's half so each role reads on its own; the protocol and its byte counts are in `dh`.
"""

from __future__ import annotations

import numpy as np

from . import shamir
from .dh_checks import CIPHERTEXT_BYTES, _check_config, _check_vector, _sorted_ids
from .errors import ProtocolError, RoundAborted
from .graph import Graph
from .keys import LOW_ORDER, generate_keypair, key_class, key_problem, pairwise_seed, private_from_bytes, public_bytes
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
from .shamir import ShareError


class Server:
    """The server's side of a round; aggregates as masked inputs arrive, never holding all of them.

    1. receive_keys(AdvertiseKeys) per client: a client whose keys are malformed, non-canonical,
       low-order or already taken is refused (ProtocolError, recorded in `rejected`) and left out;
       roster() -> KeyRoster of U1 (RoundAborted if |U1| < t), and the graph drawn from it.
    2. receive_shares(ShareKeys) per client; bundles() -> one ShareBundle per client of U2 (the senders).
    3. add(MaskedInput): checked, then summed into one uint32 accumulator at once.
       unmask_request() -> UnmaskRequest with survivors U3 (inputs that arrived) and dropped U2 \\ U3;
       RoundAborted if U3 is not connected in the graph (a part's sum could be read).
    4. receive_unmask(UnmaskResponse) per survivor; result(): rebuild b_u for u in U3 and s_sk_u for
       dropped u (from two t-subsets when t + 1 shares are there: a disagreement aborts), check each
       key against its advertised s_pk, remove the self-masks and the dropped clients' pairwise masks
       -> exactly sum_{u in U3} q_u.
    Below t at any step: RoundAborted and nothing is revealed. A message that fails a check raises
    ProtocolError and is not applied; the round goes on without it.
    Accounting: dropped_by_step (who of the previous step did not deliver; 'advertise': participants not in
    the roster, refused ones included), rejected (id -> why its advertisement was refused, for clients not
    in the roster), survivors (U3), late_ignored (how many clients' masked inputs arrived after the unmask
    request; a second one from the same client is refused as a duplicate).
    """

    def __init__(self, config: RoundConfig) -> None:
        self.config = _check_config(config)
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._classes: set[bytes] = set()  # key_class of every public key in _keys: one lookup per advertisement
        self._probe, _ = generate_keypair()  # exchanged with each advertised key: low-order points, key classes
        self.graph: Graph | None = None  # drawn from the roster
        self.rejected: dict[int, str] = {}
        self._shares: dict[int, dict[int, bytes]] = {}
        self._received: set[int] = set()
        self._responses: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._roster: KeyRoster | None = None
        self._bundles: dict[int, ShareBundle] | None = None
        self._request: UnmaskRequest | None = None
        self._result: np.ndarray | None = None
        self._sum: np.ndarray | None = None
        self.dropped_by_step: dict[str, list[int]] = {"advertise": [], "share_keys": [], "masked_input": [],
                                                      "unmask": []}
        self.survivors: tuple[int, ...] = ()
        self._late: set[int] = set()  # clients whose masked input arrived after the unmask request
        self._state = "keys"  # keys -> shares -> inputs -> unmask -> done, or aborted

    # --- 1 ------------------------------------------------------------------------------------
    def receive_keys(self, msg: AdvertiseKeys) -> None:
        self._expect("keys", "advertised keys")
        cid = self._check_sender(msg.session, msg.client_id, self.config.participants, "is not a participant")
        if cid in self._keys:
            raise ProtocolError(f"client {cid} advertised keys twice")
        keys = (msg.cipher_public_key, msg.mask_public_key)
        problem, classes = key_problem(keys[0]) or key_problem(keys[1]), ()
        if problem is None:  # compared by class, not bytes: a key plus a low-order point agrees as the key does
            classes = tuple(key_class(key, self._probe) for key in keys)
            if None in classes:
                problem = LOW_ORDER
            elif classes[0] == classes[1]:
                problem = "public key twice (the same for both agreements)"
            elif self._classes.intersection(classes):
                problem = "public key another client already sent"
        if problem is not None:
            self.rejected[cid] = problem  # left out of the roster, as if it never advertised
            raise ProtocolError(f"client {cid} refused at advertise: it sent a {problem}")
        self.rejected.pop(cid, None)
        self._keys[cid] = keys
        self._classes.update(classes)

    def roster(self) -> KeyRoster:
        if self._roster is None:
            self._expect("keys", "roster request")
            u1 = sorted(self._keys)
            self.dropped_by_step["advertise"] = sorted(set(self.config.participants) - set(u1))
            self._abort_below(u1, "advertised keys", self.dropped_by_step["advertise"])
            self._roster = KeyRoster(session=self.config.session,
                                     keys=tuple((cid, *self._keys[cid]) for cid in u1))
            self.graph = self.config.graph(self._roster)
            self._probe = None
            self._state = "shares"
        return self._roster

    # --- 2 ------------------------------------------------------------------------------------
    def receive_shares(self, msg: ShareKeys) -> None:
        self._expect("shares", "share keys")
        cid = self._check_sender(msg.session, msg.client_id, self._keys, "did not advertise keys (not in U1)")
        if cid in self._shares:
            raise ProtocolError(f"client {cid} sent its shares twice")
        recipients = _sorted_ids(msg.shares, f"shares of client {cid}", pairs=True)
        expected = list(self.graph.neighbours(cid))
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
                               shares=tuple((u, sent[u][v]) for u in self.graph.neighbours(v) if u in sent))
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
        if cid in self._received or cid in self._late:
            raise ProtocolError(f"client {cid} sent its masked input twice")
        if self._state != "inputs":  # already declared dropped: its masks are being recovered instead
            self._late.add(cid)
            return
        vector = _check_vector(msg.masked, self.config.length, f"masked input of client {cid}")
        self._sum += vector
        self._received.add(cid)

    @property
    def late_ignored(self) -> int:
        """How many clients' masked inputs arrived after the unmask request (ignored): clients, not messages."""
        return len(self._late)

    def unmask_request(self) -> UnmaskRequest:
        if self._request is None:
            self._expect("inputs", "unmask request")
            u3 = sorted(self._received)
            dropped = sorted(set(self._shares) - self._received)
            self.dropped_by_step["masked_input"] = dropped
            self.survivors = tuple(u3)
            self._abort_below(u3, "masked input", dropped)
            parts = self.graph.components(u3)
            if len(parts) > 1:  # masks between the parts never cancel in one part's sum, so it could be read
                self._state = "aborted"
                raise RoundAborted(f"round aborted: the {len(u3)} survivors are not connected in the neighbour "
                                   f"graph ({len(parts)} parts, sizes {[len(p) for p in parts]})", missing=dropped)
            self._request = UnmaskRequest(session=self.config.session, survivors=tuple(u3), dropped=tuple(dropped))
            self._state = "unmask"
        return self._request

    # --- 4 ------------------------------------------------------------------------------------
    def receive_unmask(self, msg: UnmaskResponse) -> None:
        self._expect("unmask", "unmask response")
        cid = self._check_sender(msg.session, msg.client_id, self._received, "is not a survivor (not in U3)")
        if cid in self._responses:
            raise ProtocolError(f"client {cid} sent its unmask response twice")
        group = set(self.graph.neighbours(cid)) | {cid}
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
        mask_partners = {u: [v for v in self.graph.neighbours(u) if v in alive] for u in dropped}
        need_sk = {u: self._holders(u, responders) for u, partners in mask_partners.items() if partners}
        short = sorted(u for u, holders in [*need_b.items(), *need_sk.items()] if len(holders) < cfg.threshold)
        if short:
            self._state = "aborted"
            raise RoundAborted(f"round aborted: fewer than t={cfg.threshold} unmask responses hold shares of the "
                               f"secrets of clients {short}", missing=self.dropped_by_step["unmask"])
        b = self._rebuild(need_b, part=0, what="self-mask seed")
        sk = self._rebuild(need_sk, part=2, what="mask key")
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
        if self.graph.complete:
            return responders
        group = set(self.graph.neighbours(u)) | {u}
        return [v for v in responders if v in group]

    def _rebuild(self, need: dict[int, list[int]], part: int, what: str) -> dict[int, bytes]:
        """Rebuild each owner's secret from its first t holders (owners with the same holders share one basis).
        With a (t + 1)-th holder, rebuild it also from holders 2..t+1 and abort unless both agree: a single
        forged share moves the two results differently (its Lagrange weights differ), so it cannot pass."""
        t = self.config.threshold
        groups: dict[tuple[int, ...], list[int]] = {}
        for owner, holders in need.items():
            groups.setdefault(tuple(holders[:t + 1]), []).append(owner)
        out = {}
        for holders, owners in groups.items():
            wanted = np.asarray(owners, dtype=np.int64)
            stacked = []
            for v in holders:
                ids, values = self._responses[v][part], self._responses[v][part + 1]
                stacked.append(values[np.searchsorted(ids, wanted)])
            stacked = np.stack(stacked)
            xs = [v + 1 for v in holders]
            secrets = shamir.reconstruct(xs[:t], stacked[:t])
            if len(holders) > t:
                again = shamir.reconstruct(xs[1:], stacked[1:])
                bad = [o for o, row in zip(owners, (secrets != again).any(axis=1)) if row]
                if bad:
                    self._state = "aborted"
                    raise RoundAborted(f"round aborted: the shares of the {what} of client {bad[0]} disagree "
                                       f"(a forged or corrupted share; owners affected: {bad})")
            for owner, value in zip(owners, secrets):
                try:
                    out[owner] = shamir.field_to_secret(value)
                except ShareError as exc:
                    self._state = "aborted"
                    raise RoundAborted(f"round aborted: {what} of client {owner}: {exc}") from None
        return out

    # --- checks ---------------------------------------------------------------------------------
    def _expect(self, state: str, what: str) -> None:
        if self._state != state:
            raise ProtocolError(f"unexpected {what}: the round is in state {self._state!r}")

    def _check_sender(self, session: bytes, cid: object, known, problem: str) -> int:
        if session != self.config.session:
            raise ProtocolError(f"message from client {cid} belongs to a different session (another run, round, "
                                "cohort, configuration or server nonce: a replay)")
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
