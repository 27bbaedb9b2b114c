"""How a test split is cut into evaluation batches, at the one-pass boundary, and how their sums combine."""
from fl.scores import EVAL_BATCH, ONE_PASS, batch_rows, combine, n_batches


def test_a_split_of_up_to_one_pass_is_one_batch_and_a_larger_one_is_cut_with_a_short_last_batch():
    assert [n_batches(n) for n in (1, ONE_PASS, ONE_PASS + 1, 5 * EVAL_BATCH)] == [1, 1, 5, 5]
    assert [batch_rows(n) for n in (1, ONE_PASS, ONE_PASS + 1)] == [1, ONE_PASS, EVAL_BATCH]
    assert n_batches(ONE_PASS + 1, 100) == 11 and batch_rows(ONE_PASS + 1, 100) == 100


def test_combine_is_the_accuracy_and_the_mean_loss_over_the_samples_not_the_batches():
    assert combine([(3, 1.5), (1, 0.5)], 8) == (0.5, 0.25)
