"""What a carried evaluation learns of a batch's cost, which the next round's share-out of batches reads."""
from types import SimpleNamespace

import numpy as np

from fl.evaluation import CarriedEvaluation


class _Evaluator:
    """4 batches of 10 samples; a worker's range comes back as (10 correct, loss 1) per batch."""
    batches, batch_seconds, n = 4, 0.0, 40
    pool = SimpleNamespace(put=lambda weights: "ref")

    def evaluate_ranges(self, ref, ranges):
        return {w: [(10, 1.0)] * (b - a) for w, (a, b) in ranges.items()}


def test_a_carried_range_sets_the_seconds_per_batch_the_next_share_out_uses():
    """A worker's carried range of 3 batches took 0.6 s: 0.2 s a batch, so the next round levels loads with it
    (a stale cost would hand a busy worker too many or too few batches)."""
    evaluator = _Evaluator()
    evaluator.batch_seconds = 1.0
    carried = CarriedEvaluation(evaluator, np.zeros(3, np.float32), {0: 0.0, 1: 2.0})
    assert carried.ranges == {0: (0, 3), 1: (3, 4)}  # worker 0 idles 2 s longer: 2 batches more at 1 s each
    carried.take(0, [(10, 1.0)] * 3, 0.6)
    assert evaluator.batch_seconds == 0.6 / 3
    carried.take(1, [(10, 1.0)] * 2, 5.0)  # a reply that is not its range (two batches for one) teaches nothing
    assert evaluator.batch_seconds == 0.6 / 3
    assert carried.result()[:2] == (1.0, 0.1)
