"""A round's evaluation carried by the next round's training call (fl.evaluation, `fl.eval_overlap`): the
batches shared out by training load, the same figures as evaluating after each round, and nothing lost."""
from types import SimpleNamespace

import numpy as np
import pytest
from fixtures_datasets import synthetic_images, write_mnist

import fl
from fl.evaluation import CarriedEvaluation, Evaluator, balanced_ranges
from fl.results import read_rows
from fl.scores import Spread, n_batches

# a batch of 10 samples, all right, summed loss 1, every sample predicted as class 0 with the same logits
BATCH = (10, 1.0, Spread(10, np.zeros(2), np.zeros(2), np.array([10, 0])))


def _covers(ranges: dict, batches: int) -> None:
    """Contiguous ranges in worker order that cover every batch exactly once."""
    first = 0
    for w in sorted(ranges):
        a, b = ranges[w]
        assert a == first and b > a
        first = b
    assert first == batches


def test_the_less_loaded_worker_takes_the_batches_that_level_the_round():
    assert balanced_ranges({0: 6.0, 1: 4.0}, 4, 1.0) == {0: (0, 1), 1: (1, 4)}  # both end at 7
    assert balanced_ranges({0: 9.0, 1: 1.0}, 4, 1.0) == {1: (0, 4)}  # the idle gap holds them all
    assert balanced_ranges({3: 2.0}, 5, 1.0) == {3: (0, 5)}
    assert balanced_ranges({0: 1.0, 1: 1.0}, 40, 0.0) == {0: (0, 20), 1: (20, 40)}  # no cost measured yet: even
    assert balanced_ranges({0: 1.0, 1: 5.0}, 0, 1.0) == {}


@pytest.mark.parametrize("seed", range(20))
def test_ranges_cover_every_batch_once_and_end_within_a_batch_of_each_other(seed):
    rng = np.random.default_rng(seed)
    loads = {w: float(rng.uniform(0, 3)) for w in rng.choice(8, size=rng.integers(1, 8), replace=False)}
    batches, cost = int(rng.integers(1, 60)), float(rng.uniform(0.01, 0.5))
    ranges = balanced_ranges(loads, batches, cost)
    _covers(ranges, batches)
    ends = {w: loads[w] + (ranges[w][1] - ranges[w][0]) * cost if w in ranges else loads[w] for w in loads}
    # every worker ends within a batch of the level; one left without batches was busy past it already
    assert max(ends[w] for w in ranges) - min(ends.values()) <= 2 * cost + 1e-9


@pytest.fixture(scope="module")
def three_batch_root(tmp_path_factory):
    """MNIST-format files with 3,000 test images: 12 evaluation batches, so the workers share them."""
    root = tmp_path_factory.mktemp("mnist")
    x, y = synthetic_images(4200, (28, 28), seed=5)
    write_mnist(root, "MNIST", x[:1200], y[:1200], x[1200:], y[1200:])
    assert n_batches(3000) == 12
    return root


def _run(root, results, *overrides):
    model = [] if any(o.startswith("model=") for o in overrides) else ["model=mlp_small"]
    return fl.run(fl.compose([f"results.dir={results}", "backend=ray", "dataset=mnist", f"dataset.root={root}",
                              "fl.num_clients=40", "fl.clients_per_round=10", "fl.rounds=6", "fl.local_epochs=1",
                              *model, *overrides]))


@pytest.mark.parametrize("setting", [
    ("secagg=none", "compression=topk", "compression.ratio=0.1"),
    ("secagg=dh", "compression=topk", "compression.ratio=0.1", "secagg.dropout=0.2"),
    # lenet's 431 KB of weights reach the workers through Ray's object store (mlp_small's go inside the call)
    ("secagg=none", "compression=none", "fl.eval_every=2", "model=lenet"),
], ids=["plain-topk", "masked-topk-dropouts", "lenet-dense-every-2"])
def test_carried_evaluation_gives_the_same_rows_as_evaluating_after_each_round(three_batch_root, tmp_path, ray_session,
                                                                               setting):
    carried = _run(three_batch_root, tmp_path / "on", *setting)
    after = _run(three_batch_root, tmp_path / "off", *setting, "fl.eval_overlap=false")
    for column in ("accuracy", "loss", "logit_std", "top_class_share", "bytes_up", "bytes_down", "dropped", "rejected"):
        np.testing.assert_array_equal(carried[column], after[column], err_msg=column)
    evaluated = carried["accuracy"].notna()
    assert (carried["logit_std"].notna() == evaluated).all() and (carried["top_class_share"].notna() == evaluated).all()
    assert evaluated.sum() == (6 if "fl.eval_every=2" not in setting else 4)
    # round 0 is evaluated on its own (it measures a batch's cost) and so is the last round (none follows);
    # every other evaluated round rode on the next round's training
    rode = carried["t_evaluate_carried"].fillna(0) > 0
    assert not rode.iloc[0] and not rode.iloc[-1]
    assert (rode == (evaluated & ~carried["round"].isin([0, 5]))).all()
    assert not after["t_evaluate_carried"].fillna(0).any()
    # the config hash does not depend on when evaluation runs: both runs are one configuration
    assert carried["config_hash"].iloc[0] == after["config_hash"].iloc[0]
    # the rows written to disk are the rows returned, in round order
    on_disk = read_rows(next((tmp_path / "on").glob("*/rounds.csv")))
    assert list(on_disk["round"]) == list(range(6))
    np.testing.assert_array_equal(on_disk["accuracy"], carried["accuracy"])


def test_ranges_that_did_not_come_back_are_evaluated_after_the_round(three_batch_root):
    """A worker that died, or whose clients all dropped before training, never returns its range."""
    from fl.config import validate
    from fl.data import load_dataset
    from fl.plan import Plan, model_section
    from fl.runtime.pool import InlinePool

    cfg = validate(fl.compose(["dataset=mnist", f"dataset.root={three_batch_root}", "model=mlp_small",
                               "secagg=none", "fl.num_clients=40", "fl.clients_per_round=10"]))
    data = load_dataset(cfg.dataset, seed=0)
    pool = InlinePool("cpu", 2)
    try:
        initial = pool.initial_model(model_section(cfg), data.input_shape, data.num_classes, 0, "cpu")
        pool.attach(data, Plan.build(cfg, initial["sizes"], initial["shapes"]))
        weights = np.asarray(initial["weights"])
        evaluator = Evaluator(pool, 2, len(data.y_test))
        expected = evaluator(weights)
        assert evaluator.batch_seconds > 0
        carried = CarriedEvaluation(evaluator, weights, {0: 0.0, 1: 0.0})
        assert carried.ranges == {0: (0, 6), 1: (6, 12)}  # equal loads: equal shares
        w = min(carried.ranges)
        a, b = carried.ranges[w]
        carried.take(w, pool.workers[w].evaluate(weights, a, b), 0.1)  # one range came back, the other did not
        scores, seconds = carried.result()
        assert scores == expected and seconds > 0
        nothing = CarriedEvaluation(evaluator, weights, {0: 1.0, 1: 2.0})
        assert nothing.result()[0] == expected
    finally:
        pool.close()


def test_a_range_that_came_back_short_is_evaluated_again_not_summed_as_it_is():
    """A worker's reply holding fewer batches than its range is not the range: summing it would leave batches out
    of the accuracy and loss (still divided by every test sample)."""
    class Batches:  # 4 batches of 10 samples, each all correct with a summed loss of 1
        batches, batch_seconds, n = 4, 0.0, 40
        pool = SimpleNamespace(put=lambda weights: "ref")

        def evaluate_ranges(self, ref, ranges):
            return {w: [BATCH] * (b - a) for w, (a, b) in ranges.items()}

    carried = CarriedEvaluation(Batches(), np.zeros(3, np.float32), {0: 0.0, 1: 0.0})
    assert carried.ranges == {0: (0, 2), 1: (2, 4)}
    carried.take(0, [BATCH], 0.1)  # one batch of its two
    carried.take(1, [BATCH] * 2, 0.1)
    assert carried.result()[0][:2] == (1.0, 0.1)
