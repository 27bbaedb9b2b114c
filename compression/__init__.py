"""Compression codecs for fedsqueeze: pure numpy, no torch, Ray or Hydra.

A codec turns a flat float32 update into bytes with one documented byte layout and back
(`encode(vector) -> bytes`, `decode(payload, length) -> vector`); decoding validates the payload
and raises `DecodeError` on anything malformed. Codecs are looked up by name in a registry
(`get('topk')`, or the seed framework's alias `get('TopKProtocol')`), so configs name them and an
unknown name fails with the list of registered ones.

Also here: `ErrorFeedback` (residual accumulation around any codec) and `CountSketch` (a linear
sketch whose heavy hitters pick the shared index set when updates are masked).

To add a codec: write one file holding a `Codec` subclass (its size formula in the class
docstring) ending in `register('name', TheClass)`, and import that module below.
"""

from .base import Codec, DecodeError
from .error_feedback import ErrorFeedback
from .none import NoCompression
from .registry import UnknownProtocolError, canonical, get, names, register
from .sketch import CountSketch
from .topk import TopKCompression, topk_count, topk_positions

__all__ = [
    "register",
    "get",
    "canonical",
    "names",
    "UnknownProtocolError",
    "Codec",
    "DecodeError",
    "NoCompression",
    "TopKCompression",
    "topk_positions",
    "topk_count",
    "ErrorFeedback",
    "CountSketch",
]
