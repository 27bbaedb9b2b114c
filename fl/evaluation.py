"""Evaluation of the global model on the test split, by the workers, in whole batches summed in batch order
(fl.scores): any split of the batches among workers gives the same figures.

A round's evaluation either runs on its own after the round (`Evaluator`), or rides on the next round's
training call (`CarriedEvaluation`, `fl.eval_overlap`): clients stay with the worker that owns them, so a
cohort splits unevenly between workers and the worker with fewer samples to train idles until the other
finishes. The carried batches go to the workers in proportion to that idle time, so evaluation fills it
instead of adding a step of its own; the model evaluated is the one the round was sent, and the figures
are the same.
"""
from __future__ import annotations

import time

import numpy as np

from fl.scores import Scores, combine, n_batches


def even_ranges(workers: list[int], batches: int) -> dict[int, tuple[int, int]]:
    """Contiguous, near-equal ranges of `batches` for `workers` (fewer workers where there are fewer batches)."""
    used = workers[:min(len(workers), batches)]
    bounds = np.linspace(0, batches, len(used) + 1).round().astype(int)
    return {w: (int(a), int(b)) for w, a, b in zip(used, bounds, bounds[1:])}


def balanced_ranges(loads: dict[int, float], batches: int, batch_seconds: float) -> dict[int, tuple[int, int]]:
    """Contiguous ranges of `batches` (in worker order) that level the workers' total seconds: each worker's
    `loads` (its training this round) plus its batches at `batch_seconds` each. Water-filling: the least
    loaded workers take batches until every worker that takes any ends at about the same time. Workers given
    no batch are left out."""
    workers = sorted(loads)
    if batches <= 0 or not workers:
        return {}
    if not batch_seconds > 0:
        return even_ranges(workers, batches)
    level = _level([loads[w] for w in workers], batches * batch_seconds)
    share = {w: max(0.0, (level - loads[w]) / batch_seconds) for w in workers}
    counts = {w: int(np.floor(share[w])) for w in workers}
    # the batches left by rounding down go to the workers with the largest remainders (least loaded first on ties)
    for w in sorted(workers, key=lambda v: (counts[v] - share[v], loads[v], v))[:batches - sum(counts.values())]:
        counts[w] += 1
    out, first = {}, 0
    for w in workers:
        if counts[w]:
            out[w] = (first, first + counts[w])
            first += counts[w]
    return out


def _level(loads: list[float], work: float) -> float:
    """The finishing time L with sum(max(0, L - load)) = work."""
    ordered = sorted(loads)
    total = 0.0
    for i, load in enumerate(ordered):
        total += load
        level = (total + work) / (i + 1)
        if i + 1 == len(ordered) or level <= ordered[i + 1]:
            return level
    return ordered[-1]  # not reached


class Evaluator:
    """Accuracy and loss on the test split, evaluated by the workers in parallel, each a range of whole
    batches (one worker where the split is one batch), summed in batch order: the same figures as one
    process evaluating it all. Ranges of a worker that died go to one that is alive (on a split of one batch,
    the only worker evaluating may be the one that died), or, when none is, to a fresh one. It also learns what a
    batch costs, which `CarriedEvaluation` needs to share batches out."""

    def __init__(self, pool, size: int, n_test: int):
        self.pool, self.n = pool, n_test
        self.batches = n_batches(n_test)
        self.ranges = even_ranges(list(range(size)), self.batches)
        self.batch_seconds = 0.0  # a worker's seconds per batch, last measured (0: not yet)

    def __call__(self, weights: np.ndarray) -> Scores:
        t0 = time.perf_counter()
        ref = self.pool.put(weights)
        replies = self.evaluate_ranges(ref, self.ranges)
        # the ranges ran side by side: the slowest range's batches took the whole wait
        self.batch_seconds = (time.perf_counter() - t0) / max(b - a for a, b in self.ranges.values())
        return combine([batch for w in sorted(replies) for batch in replies[w]], self.n)

    def evaluate_ranges(self, ref, ranges: dict[int, tuple[int, int]]) -> dict[int, list]:
        """Each worker's range (worker -> (first, stop)) evaluated, a dead worker's by one that is alive (by a fresh
        one when every worker is dead: a pool of one, or all died at once; the run goes on, as after any death)."""
        replies = self.pool.evaluate({w: (ref, a, b) for w, (a, b) in ranges.items()})
        replaced = False
        for w in [w for w in ranges if replies[w] is None]:
            while replies[w] is None:  # a worker that died: its range goes to one that is alive
                alive = [v for v in range(len(self.pool.workers)) if v not in getattr(self.pool, "dead", ())]
                if not alive:
                    if replaced:
                        timeout = getattr(self.pool, "timeout", None)  # a worker killed as hung counts as dead
                        raise RuntimeError("every worker died while evaluating the model, fresh ones too" + (
                            f", or sent nothing for ray.call_timeout_s={timeout:g} s: set it above an evaluation's "
                            "seconds" if timeout else ""))
                    self.pool.replace_dead()
                    replaced = True
                    continue
                replies[w] = self.pool.evaluate({alive[0]: (ref, *ranges[w])})[alive[0]]
        return replies


class CarriedEvaluation:
    """One round's evaluation, carried by the next round's training call: `spec(w)` is what worker w's call
    takes (its weights and batch range), `take` receives what a worker evaluated, and `result` evaluates
    whatever did not come back (a worker that died, or whose clients all dropped before training) with the
    `Evaluator`, then sums every batch in batch order."""

    def __init__(self, evaluator: Evaluator, weights: np.ndarray, loads: dict[int, float]):
        self.evaluator = evaluator
        self.ref = evaluator.pool.put(weights.copy())  # the round's weights: the next round changes the server's
        self.ranges = balanced_ranges(loads, evaluator.batches, evaluator.batch_seconds)
        self.done: dict[int, list] = {}  # first batch -> that range's (correct, loss, spread) per batch
        self.worker_seconds = 0.0

    def spec(self, w: int) -> dict | None:
        if w not in self.ranges:
            return None
        return {"eval_weights": self.ref, "eval_batches": self.ranges[w]}

    def take(self, w: int, batches: list, seconds: float) -> None:
        first, stop = self.ranges[w]
        if len(batches) == stop - first:
            self.done[first] = batches
            self.worker_seconds += seconds
            if stop > first:
                self.evaluator.batch_seconds = seconds / (stop - first)

    def result(self) -> tuple[Scores, float]:
        """(the round's `Scores`, seconds spent here on ranges that were not carried)."""
        t0 = time.perf_counter()
        missing = {w: r for w, r in self.ranges.items() if r[0] not in self.done}
        if missing:
            for w, batches in self.evaluator.evaluate_ranges(self.ref, missing).items():
                self.done[self.ranges[w][0]] = batches
        scores = combine([b for first in sorted(self.done) for b in self.done[first]], self.evaluator.n)
        return scores, time.perf_counter() - t0
