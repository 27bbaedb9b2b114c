"""Secure aggregation for fedsqueeze: pure protocol state machines and crypto (numpy + cryptography only).

Security promise: against an honest-but-curious server colluding with fewer than t clients, the server
learns only the sum of the inputs. Not covered: a malicious server that equivocates or sends
different rosters or models to different clients.

This version has pairwise DH masking (`dh`), which needs every participant to finish: a missing client
aborts the round. Dropout recovery arrives with Bonawitz double masking and Shamir shares.
"""

from . import dh, none  # noqa: F401  (importing registers the protocols)
from .dh import DHClient, DHProtocol, DHServer
from .errors import ProtocolError, RoundAborted
from .keys import generate_keypair, pairwise_seed, session_id
from .messages import AdvertiseKeys, KeyRoster, MaskedInput
from .none import NoMasking
from .prg import prg_uint32
from .quantize import FixedPointQuantizer
from .registry import UnknownProtocolError, canonical, get, names, register

__all__ = [
    "AdvertiseKeys",
    "DHClient",
    "DHProtocol",
    "DHServer",
    "FixedPointQuantizer",
    "KeyRoster",
    "MaskedInput",
    "NoMasking",
    "ProtocolError",
    "RoundAborted",
    "UnknownProtocolError",
    "canonical",
    "generate_keypair",
    "get",
    "names",
    "pairwise_seed",
    "prg_uint32",
    "register",
    "session_id",
]
