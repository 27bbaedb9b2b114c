"""How a test split is cut into evaluation batches and how their sums add up (no torch: the driver uses it).

A split of up to ONE_PASS samples is one batch (one forward pass); a larger one is cut into batches of
EVAL_BATCH, small enough for a convolution's activations to stay in cache. Workers evaluate whole batches
and `combine` sums them in batch order, so any split of the batches among workers gives the same figures.
"""
from __future__ import annotations

ONE_PASS = 1024
EVAL_BATCH = 256
# keys of a worker's timings that carry an evaluation's batches and its seconds (fl.evaluation)
EVALUATED, EVALUATED_SECONDS = "evaluated", "evaluated_s"


def n_batches(n: int, batch_size: int = EVAL_BATCH) -> int:
    """Evaluation batches of a split of n samples (one where it is evaluated in one pass)."""
    return 1 if n <= ONE_PASS else -(-n // batch_size)


def batch_rows(n: int, batch_size: int = EVAL_BATCH) -> int:
    """Samples per evaluation batch of a split of n samples (all of them where it is one pass)."""
    return n if n <= ONE_PASS else batch_size


def combine(batches: list[tuple[int, float]], n: int) -> tuple[float, float]:
    """(accuracy, mean loss) from per-batch (correct, summed loss), summed in batch order."""
    correct, loss = 0, 0.0
    for c, l in batches:
        correct += c
        loss += l
    return correct / n, loss / n
