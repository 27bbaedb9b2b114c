"""SecAgg+ (Bell et al., CCS 2020): the same double masking over a sparse random graph, `secaggplus`.

Each client masks with, and Shamir-shares b_u and s_sk_u among, only its k neighbours in a k-regular
graph over the key roster (RoundConfig.graph: the Harary graph H(k, m), a ring, relabelled by a PRG keyed
by every advertised key, so nobody knows it before fresh keys are in, and every party derives
the same graph from the roster with no extra message). The default degree is the smallest even
k >= 2 ceil(log2 n), capped at n - 1, and the threshold t = (k + 1) // 2 + 1 (k // 2 + 1 for even k) counts shares
among the k + 1 holders of a secret (the owner included). Client and server work per client drop from O(n) to O(k) =
O(log n) key agreements and mask expansions.

Privacy holds only while the survivors stay connected in the graph: masks between two survivors cancel
only in a sum over both, so survivors split into parts with no edge between them would let the server
read one part's sum. Server (unmask_request) and every client (unmask) check it and abort otherwise.

Dropout recovery is per neighbourhood: the round completes when every survivor's self-mask seed and
every needed dropped key has t surviving holders among its neighbourhood; otherwise it aborts
(RoundAborted), never returning a wrong sum. With k = 2 ceil(log2 n) this fails only when a neighbourhood
loses more than about half its members or two runs of k/2 ring neighbours drop; the full graph's guarantee
(exact while >= t of n remain) does not carry over pattern by pattern.

Bytes per client and round: as `dh` (secagg/dh.py) over k neighbours: up about 112 + 114 k + 49 + ceil(b L / 8) +
51 + 46 (k + 1) + 49 (a masked vector of L elements in a field of b bits), down about 73 n + 41 + 114 k + 49 + 2 n +
43 (the roster and the unmask request still list every client).
"""

from __future__ import annotations

from .dh_client import Client
from .dh_server import Server
from .registry import register


class SecAggPlusProtocol:
    """Bonawitz-style double masking over a logarithmic-degree random graph (SecAgg+)."""

    name = "secaggplus"
    masks = True
    full_graph = False
    Client = Client
    Server = Server


register("secaggplus", SecAggPlusProtocol, aliases=("SecAggPlusProtocol",))
