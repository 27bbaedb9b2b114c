"""experiments.bench_sim's measure of what evaluation adds to a round (no run: synthetic round times)."""
import numpy as np
import pytest

from experiments.bench_sim import evaluation_share


@pytest.mark.parametrize("carried", [True, False])
def test_evaluations_cost_is_recovered_whatever_the_cohorts_and_a_drift_between_runs(carried):
    rng = np.random.default_rng(0)
    plain = list(1.0 + 0.3 * rng.random(61) + 0.002 * np.arange(61))  # cohorts vary; the machine slows down
    working = 1 if carried else 0  # carried: round r + 1 does round r's evaluation
    evaluated = [p * 1.04 + 0.02 + (0.15 if r % 2 == working else 0.0) for r, p in enumerate(plain)]  # another day
    added, share, with_eval = evaluation_share(evaluated, plain, carried)
    assert added == pytest.approx(0.15, abs=0.01)
    rounds = [evaluated[r] for r in range(2, 60) if r % 2 == working]
    assert with_eval == pytest.approx(np.mean(rounds)) and share == pytest.approx(added / with_eval)
