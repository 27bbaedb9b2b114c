"""Secure aggregation for fedsqueeze: pure protocol state machines and crypto (numpy + cryptography only).

Protocols (registry names): `dh` (alias `DHProtocol`) is Bonawitz et al. (CCS 2017) double masking with
Shamir-shared self-mask seeds and mask keys over the full graph; `secaggplus` (alias `SecAggPlusProtocol`)
is the same over a randomly relabelled k-regular (Harary) graph of logarithmic degree drawn from the key roster
(Bell et al. 2020); `none` does not mask. A round: `config = make_round('dh', session, cohort, length)` with
`session = session_id(run, round, cohort, protocol='dh', length=length, nonce=server_nonce)`, then
`Client(config, id)` / `Server(config)` through advertise keys -> share keys -> masked input -> unmask.

Security promise: against an honest-but-curious server colluding with fewer than t clients, the server
learns only the sum of the surviving clients' masked vectors (of which the colluders know their own), who
dropped, and the public index set; with SecAgg+ only while the survivors stay connected in the graph (checked by
clients and server: abort otherwise). Dropouts at any step are recovered while at least t clients remain
(SecAgg+: per neighbourhood); below t the round aborts (RoundAborted) and nothing is revealed. Not covered: a
malicious server that equivocates (different rosters, requests or models to different clients) or substitutes
clients' keys (there is no PKI). See docs/secagg.md.
"""

from . import dh, none, secaggplus  # noqa: F401  (importing registers the protocols)
from .dh import DHProtocol, SecAggProtocol
from .dh_checks import CIPHERTEXT_BYTES
from .dh_client import Client
from .dh_server import Server
from .errors import ProtocolError, RoundAborted
from .keys import generate_keypair, pairwise_seed
from .messages import (
    AdvertiseKeys,
    KeyRoster,
    MaskedInput,
    ShareBundle,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
)
from .none import NoMasking
from .prg import prg_uint32
from .quantize import MAX_FIELD_BITS, FixedPointQuantizer, smallest_safe_bits
from .registry import UnknownProtocolError, canonical, get, names, register
from .graph import Graph
from .round import MAX_CLIENT_ID, RoundConfig, default_degree, make_round, session_id
from .secaggplus import SecAggPlusProtocol
from .shamir import SHARE_BYTES

__all__ = [
    "AdvertiseKeys",
    "CIPHERTEXT_BYTES",
    "Client",
    "DHProtocol",
    "FixedPointQuantizer",
    "MAX_FIELD_BITS",
    "smallest_safe_bits",
    "Graph",
    "KeyRoster",
    "MAX_CLIENT_ID",
    "MaskedInput",
    "NoMasking",
    "ProtocolError",
    "RoundAborted",
    "RoundConfig",
    "SHARE_BYTES",
    "SecAggPlusProtocol",
    "SecAggProtocol",
    "Server",
    "ShareBundle",
    "ShareKeys",
    "UnknownProtocolError",
    "UnmaskRequest",
    "UnmaskResponse",
    "canonical",
    "default_degree",
    "generate_keypair",
    "get",
    "make_round",
    "names",
    "pairwise_seed",
    "prg_uint32",
    "register",
    "session_id",
]
