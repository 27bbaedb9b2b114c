"""Secure aggregation with dropout recovery (Bonawitz et al., CCS 2017): the `dh` protocol.

Each client u holds two fresh X25519 pairs per round, (c_sk, c_pk) for share transport and (s_sk, s_pk)
for masks, and a fresh self-mask seed b_u. With N(u) its neighbours (all other roster clients here; a
k-regular graph for SecAgg+, see secagg/secaggplus.py and secagg/graph.py):

    y_u = q_u + PRG(b_u) + sum_{v in N(u) ∩ U2, v > u} PRG(s_uv) - sum_{v in N(u) ∩ U2, v < u} PRG(s_uv)

over Z_2^32, where s_uv = HKDF(X25519(s_sk_u, s_pk_v)) and U2 is the set of clients that sent shares.
b_u and s_sk_u are Shamir-shared t-of-|N(u)|+1 (x = id + 1) among u and its neighbours, each share pair
encrypted to its holder. After the masked inputs (survivors U3), each surviving client reveals its share of
b_w for survivors w and of s_sk_w for dropped w (never both for one w), and the server

    sum_{u in U3} y_u - sum_{u in U3} PRG(b_u) -/+ PRG(s_uv) for dropped u in U2 \\ U3 and survivors v in N(u)

is exactly sum_{u in U3} q_u. Below t the round aborts (RoundAborted) before anything is revealed.

Bytes per client and round (full graph, n clients, vector length L, client ids in [2^7, 2^14), measured from
fl.wire; an id below 2^7 takes one byte less wherever it appears): up 112 (AdvertiseKeys) + 114 (n - 1) + 49
(ShareKeys: a 112-byte ciphertext + id each) + ceil(b L / 8) + about 51 (MaskedInput, in a field of b bits) +
46 n + 49 (UnmaskResponse: a 44-byte share + id per owner); down 73 n + 41 (KeyRoster) + 114 (n - 1) + 49
(ShareBundle) + about 2 n + 43 (UnmaskRequest). With a k-regular graph, the ShareKeys and ShareBundle terms
count k peers instead of n - 1, and the UnmaskResponse term k + 1 owners instead of n.

The two halves are `dh_client.Client` and `dh_server.Server` (shared with SecAgg+); this module names the
protocol and registers it.
"""

from __future__ import annotations

from .dh_checks import CIPHERTEXT_BYTES, SHARE_PAYLOAD_BYTES
from .dh_client import Client
from .dh_server import Server
from .registry import register

__all__ = ["CIPHERTEXT_BYTES", "SHARE_PAYLOAD_BYTES", "Client", "Server", "SecAggProtocol", "DHProtocol"]


class SecAggProtocol:
    """Bonawitz et al. secure aggregation over the full graph: exact sums while >= t clients remain."""

    name = "dh"
    masks = True
    full_graph = True
    Client = Client
    Server = Server


DHProtocol = SecAggProtocol  # the seed framework's name

register("dh", SecAggProtocol, aliases=("DHProtocol",))
