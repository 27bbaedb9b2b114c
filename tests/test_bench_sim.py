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
    added, share, with_eval, error = evaluation_share(evaluated, plain, carried)
    assert added == pytest.approx(0.15, abs=0.01)
    rounds = [evaluated[r] for r in range(2, 60) if r % 2 == working]
    assert with_eval == pytest.approx(np.mean(rounds)) and share == pytest.approx(added / with_eval)
    assert 0 < error < 0.01  # the cohorts pair round by round: only the 4% drift is left to scatter


def test_the_standard_error_is_that_of_a_difference_of_two_means_and_shrinks_with_rounds():
    rng = np.random.default_rng(1)

    def errors(rounds):
        plain = [1.0] * rounds
        evaluated = [1.0 + (0.1 if r % 2 else 0.0) + rng.normal(0, 0.2) for r in range(rounds)]  # a noisy host
        added, share, with_eval, error = evaluation_share(evaluated, plain, carried=True)
        n = (rounds - 3) // 2  # rounds 2..R-2, half of them of each kind
        return added, error * with_eval, 0.2 * np.sqrt(2 / n)

    added, error, expected = errors(61)
    assert error == pytest.approx(expected, rel=0.3) and abs(added - 0.1) < 4 * expected
    assert errors(801)[1] < error / 2  # 4 times the rounds, about half the error
