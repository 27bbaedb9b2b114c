"""Compression codecs for fedsqueeze: pure numpy, no torch, Ray or Hydra.

A codec turns a flat float32 update into bytes with one documented byte layout and back
(`encode(vector) -> bytes`, `decode(payload, length) -> vector`); decoding validates the payload
and raises `DecodeError` on anything malformed. Codecs are looked up by name in a registry
(`get('topk')`, or the seed framework's alias `get('TopKProtocol')`), so configs name them and an
unknown name fails with the list of registered ones.

Codecs: `none` (dense float32), `topk`, `randk`, `ternary`, `qsgd`, `fp16`, `int8`, `countsketch`, `rotation`.
Also here: `ErrorFeedback` (residual accumulation around any codec), `MemoryFeedback` (a client's
memory of what the server holds of its update), `CountSketch` (a linear sketch
whose heavy hitters pick the shared index set when updates are masked) and `SketchAccumulator`
(server-side error feedback for the count-sketch codec).

To add a codec: write one file in this package holding a `Codec` subclass (its size formula in the
class docstring) that ends in `register('name', TheClass)`. Every module of the package is imported
below, so nothing else in the package needs editing; its tests need a size formula, an accuracy bound and a
bar in the existing test files (docs/adding_a_codec.md, "Tests").
"""

import importlib as _importlib
import pkgutil as _pkgutil

from .base import Codec, DecodeError
from .error_feedback import ErrorFeedback, MemoryFeedback
from .none import NoCompression
from .registry import UnknownProtocolError, canonical, get, names, register
from .sketch import CountSketch
from .topk import TopKCompression, topk_count, topk_positions

# after none and topk, so that the unknown-name error lists those first
from .countsketch import CountSketchCompression, SketchAccumulator
from .fp16 import Float16Compression
from .int8 import Int8Compression
from .qsgd import QSGDCompression
from .randk import RandKCompression
from .ternary import TernaryCompression

for _module in _pkgutil.iter_modules(__path__):  # a codec added as one file registers itself here
    if not _module.name.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module.name}")

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
    "RandKCompression",
    "TernaryCompression",
    "QSGDCompression",
    "Float16Compression",
    "Int8Compression",
    "CountSketchCompression",
    "SketchAccumulator",
    "topk_positions",
    "topk_count",
    "ErrorFeedback",
    "MemoryFeedback",
    "CountSketch",
]
