"""Cohorts and client seeds come from (root seed, round, client id) alone."""
from fl import seeds


def test_a_cohort_is_a_sorted_seeded_sample_that_changes_with_the_round_and_the_root():
    cohort = seeds.cohort(0, 3, 100, 10)
    assert cohort == sorted(set(cohort)) and len(cohort) == 10 and all(0 <= c < 100 for c in cohort)
    assert cohort == seeds.cohort(0, 3, 100, 10)
    assert cohort != seeds.cohort(0, 4, 100, 10) and cohort != seeds.cohort(1, 3, 100, 10)
    assert seeds.cohort(0, 3, 10, 10) == list(range(10))  # full participation: everyone, no draw


def test_client_seeds_differ_per_client_round_and_root_and_repeat():
    s = seeds.client_seed(0, 1, 2)
    assert s == seeds.client_seed(0, 1, 2)
    assert len({s, seeds.client_seed(0, 1, 3), seeds.client_seed(0, 2, 2), seeds.client_seed(1, 1, 2)}) == 4


def test_cohorts_and_client_seeds_are_those_the_committed_results_were_drawn_with():
    """Pinned: a changed derivation (its tags, the draw) re-draws every committed run's cohorts and local seeds."""
    assert seeds.cohort(0, 3, 100, 10) == [2, 8, 11, 15, 24, 63, 64, 81, 91, 94]
    assert seeds.cohort(42, 0, 20, 5) == [1, 9, 10, 13, 14]
    assert seeds.client_seed(0, 1, 2) == 1537741374 and seeds.client_seed(42, 0, 3) == 1533508256
