"""What a carried evaluation learns of a batch's cost, which the next round's share-out of batches reads."""
from types import SimpleNamespace

import numpy as np

from fl.evaluation import CarriedEvaluation
from fl.scores import Spread

BATCH = (10, 1.0, Spread(10, np.zeros(2), np.zeros(2), np.array([10, 0])))  # 10 right, summed loss 1


class _Evaluator:
    """4 batches of 10 samples; a worker's range comes back as (10 correct, loss 1) per batch."""
    batches, batch_seconds, n = 4, 0.0, 40
    pool = SimpleNamespace(put=lambda weights: "ref")

    def evaluate_ranges(self, ref, ranges):
        return {w: [BATCH] * (b - a) for w, (a, b) in ranges.items()}


def test_a_carried_range_sets_the_seconds_per_batch_the_next_share_out_uses():
    """A worker's carried range of 3 batches took 0.6 s: 0.2 s a batch, so the next round levels loads with it
    (a stale cost would hand a busy worker too many or too few batches)."""
    evaluator = _Evaluator()
    evaluator.batch_seconds = 1.0
    carried = CarriedEvaluation(evaluator, np.zeros(3, np.float32), {0: 0.0, 1: 2.0})
    assert carried.ranges == {0: (0, 3), 1: (3, 4)}  # worker 0 idles 2 s longer: 2 batches more at 1 s each
    carried.take(0, [BATCH] * 3, 0.6)
    assert evaluator.batch_seconds == 0.6 / 3
    carried.take(1, [BATCH] * 2, 5.0)  # a reply that is not its range (two batches for one) teaches nothing
    assert evaluator.batch_seconds == 0.6 / 3
    assert carried.result()[0][:2] == (1.0, 0.1)


def test_a_dead_workers_range_goes_to_a_worker_that_is_alive():
    """Worker 0 died: its range is asked of worker 1, never of worker 0 again (whose reply would be None for ever)."""
    from fl.evaluation import Evaluator

    class Pool:
        workers, dead = [object(), object()], {0}

        def __init__(self):
            self.asked = []

        def evaluate(self, calls):
            self.asked.append(sorted(calls))
            if len(self.asked) > 3:
                raise AssertionError(f"asked {self.asked}: a dead worker's range went round again")
            return {w: None if w in self.dead else [(b - a, 0.5)] * (b - a) for w, (_, a, b) in calls.items()}

    pool = Pool()
    evaluator = Evaluator(pool, 2, 30)
    replies = evaluator.evaluate_ranges("ref", {0: (0, 2), 1: (2, 3)})
    assert replies == {0: [(2, 0.5)] * 2, 1: [(1, 0.5)]} and pool.asked == [[0, 1], [1]]
