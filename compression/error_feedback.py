"""Error feedback: what a codec drops this round is added back to the next round's update; or, as a memory, what
the server already holds of a client's update is left out of the next one."""

from __future__ import annotations

import numpy as np

from .base import Codec, check_vector

__all__ = ["ErrorFeedback", "MemoryFeedback"]


class ErrorFeedback:
    """Residual accumulation around any codec (EF-SGD; Deep Gradient Compression).

    A biased codec such as top-k at a small ratio drops most of every update; without feedback the
    dropped coordinates are lost for good and accuracy falls. With it nothing is lost, only delayed:
    over any number of rounds, sum(decoded payloads) + final residual == sum(updates).

    Per round:
      1. corrected = update + residual (no residual yet: zeros)
      2. payload = codec.encode(corrected)
      3. new residual = corrected - codec.decode(payload), what the server did not receive
    The caller keeps the residual (one per client, across rounds) and passes it back next round.

    The invariant holds for any codec; whether the residual stays bounded depends on the codec
    being a contraction (top-k, rand-k, ternary, fp16 and int8 are; QSGD with fewer levels than sqrt(n)
    is not: its error can exceed the input, which is one reason unbiased codecs run without feedback). A
    count sketch decoded with too few rows or too many heavy hitters is not, and its residual diverges; its
    defaults keep it from exploding, though it still grows (see `CountSketchCompression`), and
    `SketchAccumulator` keeps the feedback on the server instead.
    """

    def __init__(self, codec: Codec):
        self.codec = codec

    def encode(self, update: np.ndarray, residual: np.ndarray | None) -> tuple[bytes, np.ndarray]:
        """(payload, new float32 residual) for this round's `update`; ValueError if the residual overflows float32
        (a decoded entry of the other sign near float32's limit: a count sketch's estimate, a rotation's)."""
        corrected, residual = _checked(update, residual, "residual")
        if residual is not None:
            with np.errstate(over="ignore"):  # an overflow is inf, which the codec refuses with its ValueError
                corrected = corrected + residual
        payload = self.codec.encode(corrected)
        # Decoding what was sent (rather than trusting the codec's internals) gives exactly what the server sees.
        with np.errstate(over="ignore"):  # a decoded entry of the other sign near float32's limit: refused below
            new_residual = corrected - self.codec.decode(payload, corrected.size)
        if not np.isfinite(new_residual).all():  # stored, it would refuse every later update of this client
            raise ValueError("error feedback: the residual (input - decoded) overflows float32")
        return payload, new_residual

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.codec!r})"


class MemoryFeedback:
    """A client's memory of what the server holds of its update (EF21, Richtarik et al. 2021; with partial
    participation, as in MIFA, Gu et al. 2021, the server applies the mean of every client's memory each round).

    Per round: payload = codec.encode(update - memory); memory += codec.decode(payload). The server adds the decoded
    payloads into one sum, which then equals the sum of every client's memory: a client absent this round still
    counts with what it last sent, and a codec's error is left in (update - memory), sent when it matters.
    """

    def __init__(self, codec: Codec):
        self.codec = codec

    def encode(self, update: np.ndarray, memory: np.ndarray | None) -> tuple[bytes, np.ndarray]:
        """(payload, new float32 memory); ValueError if the update or the new memory is not finite."""
        difference, memory = _checked(update, memory, "memory")
        if memory is not None:
            with np.errstate(over="ignore"):  # as in ErrorFeedback.encode
                difference = difference - memory
        payload = self.codec.encode(difference)
        with np.errstate(over="ignore"):
            decoded = self.codec.decode(payload, difference.size)
            new_memory = decoded if memory is None else memory + decoded
        if not np.isfinite(new_memory).all():
            raise ValueError("memory feedback: the memory (memory + decoded) overflows float32")
        return payload, new_memory.astype(np.float32, copy=False)


def _checked(update, held, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """`update` and the client's `held` vector (None: none yet) as finite float32 vectors of one shape."""
    update = check_vector(update)
    if held is None:
        return update, None
    held = check_vector(held)
    if held.shape != update.shape:
        raise ValueError(f"{what} has shape {held.shape}, update has {update.shape}")
    return update, held
