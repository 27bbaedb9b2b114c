"""How a test split is cut into evaluation batches, at the one-pass boundary, and how their sums combine."""
import numpy as np
import pytest

from fl.scores import EVAL_BATCH, ONE_PASS, Spread, batch_rows, combine, n_batches


def _spread(logits: np.ndarray) -> Spread:
    mean = logits.mean(0)
    return Spread(len(logits), mean, ((logits - mean) ** 2).sum(0), np.bincount(logits.argmax(1), minlength=3))


def test_a_split_of_up_to_one_pass_is_one_batch_and_a_larger_one_is_cut_with_a_short_last_batch():
    assert [n_batches(n) for n in (1, ONE_PASS, ONE_PASS + 1, 5 * EVAL_BATCH)] == [1, 1, 5, 5]
    assert [batch_rows(n) for n in (1, ONE_PASS, ONE_PASS + 1)] == [1, ONE_PASS, EVAL_BATCH]
    assert n_batches(ONE_PASS + 1, 100) == 11 and batch_rows(ONE_PASS + 1, 100) == 100


def test_combine_is_the_accuracy_and_the_mean_loss_over_the_samples_not_the_batches():
    logits = np.eye(3)[[0, 1, 2, 2, 2, 2, 0, 1]]
    scores = combine([(3, 1.5, _spread(logits[:2])), (1, 0.5, _spread(logits[2:]))], 8)
    assert scores[:2] == (0.5, 0.25) and scores.top_class_share == 4 / 8


@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_the_logits_spread_pooled_over_batches_is_their_std_over_every_sample(offset):
    """Batches of unequal sizes pool to numpy's std over the whole split, each logit's then averaged over the
    classes; logits near 1e6 that differ by about 1 lose nothing (a sum of squares would cancel to noise)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(1000, 3)) * [1.0, 2.0, 0.5] + offset
    cuts = [0, 256, 512, 700, 1000]
    scores = combine([(0, 0.0, _spread(logits[a:b])) for a, b in zip(cuts, cuts[1:])], 1000)
    assert scores.logit_std == pytest.approx(logits.std(0).mean(), rel=1e-9)
    assert scores.top_class_share == np.bincount(logits.argmax(1)).max() / 1000


def test_a_model_that_gives_every_sample_the_same_logits_has_no_spread_and_one_class():
    same = np.tile([0.1, 2.0, -1.0], (300, 1))
    scores = combine([(100, 300.0, _spread(same[:256])), (0, 100.0, _spread(same[256:]))], 300)
    assert scores.logit_std < 1e-12 and scores.top_class_share == 1.0  # 0 up to the means' last bits
