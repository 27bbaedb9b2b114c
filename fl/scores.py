"""How a test split is cut into evaluation batches and how their sums add up (no torch: the driver uses it).

A split of up to ONE_PASS samples is one batch (one forward pass); a larger one is cut into batches of
EVAL_BATCH, small enough for a convolution's activations to stay in cache. Workers evaluate whole batches
and `combine` sums them in batch order, so any split of the batches among workers gives the same figures.

Besides accuracy and loss, a round records whether the model still looks at its input: the logits' spread
across the test images and the largest share of them given one class. A model whose features died gives
every image the same logits (spread near 0, one class for all), which its accuracy alone does not tell from
a model that is merely poor.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

ONE_PASS = 1024
EVAL_BATCH = 256
# A model that gives one class to at least this share of the test images, its logits varying by less than this
# across them, no longer looks at its input (dead features): a run that ends so warns, experiments.health lists it
COLLAPSED_SHARE, COLLAPSED_STD = 0.99, 0.01
# keys of a worker's timings that carry an evaluation's batches and its seconds (fl.evaluation)
EVALUATED, EVALUATED_SECONDS = "evaluated", "evaluated_s"


def n_batches(n: int, batch_size: int = EVAL_BATCH) -> int:
    """Evaluation batches of a split of n samples (one where it is evaluated in one pass)."""
    return 1 if n <= ONE_PASS else -(-n // batch_size)


def batch_rows(n: int, batch_size: int = EVAL_BATCH) -> int:
    """Samples per evaluation batch of a split of n samples (all of them where it is one pass)."""
    return n if n <= ONE_PASS else batch_size


class Spread(NamedTuple):
    """One batch's logits: rows, per-class mean and sum of squared deviations (float64), and how many rows
    predict each class (rows with a NaN logit predict none)."""
    rows: int
    mean: np.ndarray
    m2: np.ndarray
    predicted: np.ndarray


class Scores(NamedTuple):
    """A test split's figures. `logit_std`: each logit's standard deviation across the images (population),
    averaged over the classes; `top_class_share`: the largest share of the images predicted as one class."""
    accuracy: float
    loss: float
    logit_std: float
    top_class_share: float


def combine(batches: list[tuple[int, float, Spread]], n: int) -> Scores:
    """The split's `Scores` from per-batch (correct, summed loss, `Spread`), summed in batch order (the
    spreads pooled as Chan et al. pool variances: no cancellation of large sums)."""
    correct, loss = 0, 0.0
    rows, mean, m2, predicted = 0, 0.0, 0.0, 0
    with np.errstate(invalid="ignore", over="ignore"):  # a model with non-finite logits has a NaN spread
        for c, l, spread in batches:
            correct += c
            loss += l
            total = rows + spread.rows
            delta = spread.mean - mean
            mean = mean + delta * (spread.rows / total)
            m2 = m2 + spread.m2 + delta * delta * (rows * spread.rows / total)
            predicted = predicted + spread.predicted
            rows = total
        return Scores(correct / n, loss / n, float(np.mean(np.sqrt(m2 / rows))), int(np.max(predicted)) / n)


def collapsed(top_class_share, logit_std):
    """Whether a model with these scores (numbers or arrays of them) collapsed (COLLAPSED_SHARE, COLLAPSED_STD)."""
    return (top_class_share >= COLLAPSED_SHARE) & (logit_std < COLLAPSED_STD)
