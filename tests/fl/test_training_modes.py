"""Training and evaluation modes (batch statistics, dropout) and SGD's momentum at a moderate value."""
import numpy as np
import pytest
import torch

from fl.training import SGD, evaluate, train_local


def _bn_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 3))


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(2.0, 3.0, size=(n, 8)).astype(np.float32), rng.integers(0, 3, n).astype(np.int64)


def test_evaluation_uses_running_statistics_and_leaves_them_alone():
    """A model handed over in training mode is evaluated in eval mode: BatchNorm normalizes with its running
    statistics (the figures do not depend on which samples share a batch) and the evaluation updates none of them."""
    model = _bn_model()
    x, y = _data()
    train_local(model, SGD(model.parameters(), 0.05), x, y, 1, 32, seed=0)
    assert model.training
    running = model[1].running_mean.clone()
    accuracy, loss = evaluate(model, x, y)
    torch.testing.assert_close(model[1].running_mean, running, rtol=0, atol=0)
    reference = _bn_model()
    reference.load_state_dict(model.state_dict())
    reference.eval()
    with torch.no_grad():
        logits = reference(torch.from_numpy(x)).double()
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))), rel=1e-6)
    assert accuracy == float((logits.argmax(1) == torch.from_numpy(y)).double().mean())


def test_local_training_after_an_evaluation_trains_in_training_mode():
    """Evaluation leaves the model in eval mode; the next client's training must switch it back, or BatchNorm
    would neither use batch statistics nor update its running ones (and dropout would stay off)."""
    model = _bn_model()
    x, y = _data()
    evaluate(model, x, y)
    running = model[1].running_mean.clone()
    train_local(model, SGD(model.parameters(), 0.05), x, y, 1, 32, seed=0)
    assert not torch.equal(model[1].running_mean, running)


@pytest.mark.parametrize("momentum", [0.3, 0.5])
def test_sgd_with_a_moderate_momentum_takes_the_steps_of_torch_optim_sgd(momentum):
    """Momentum is applied whatever its value (the suite's other cases use 0 and 0.9)."""
    torch.manual_seed(1)
    ours = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    reference.load_state_dict(ours.state_dict())
    x, y = _data(96, seed=2)
    train_local(ours, SGD(ours.parameters(), 0.05, momentum), x, y, 2, 16, seed=3)
    train_local(reference, torch.optim.SGD(reference.parameters(), lr=0.05, momentum=momentum), x, y, 2, 16, seed=3)
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("lr,weight_decay", [(0.2, 0.0), (0.01, 0.05)])
def test_sgd_steps_by_the_learning_rate_it_is_given(lr, weight_decay):
    """fl.lr reaches every step (the suite's other cases all train at 0.05)."""
    torch.manual_seed(2)
    ours = torch.nn.Linear(8, 3)
    reference = torch.nn.Linear(8, 3)
    reference.load_state_dict(ours.state_dict())
    x, y = _data(64, seed=4)
    train_local(ours, SGD(ours.parameters(), lr, 0.0, weight_decay), x, y, 1, 16, seed=0)
    train_local(reference, torch.optim.SGD(reference.parameters(), lr=lr, weight_decay=weight_decay), x, y, 1, 16,
                seed=0)
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_batches_follow_one_seeded_permutation_per_epoch():
    """Committed results depend on the batch order: each epoch takes the next permutation of one
    np.random.default_rng(seed), cut into batches in order (the last one short)."""
    torch.manual_seed(5)
    ours = torch.nn.Linear(8, 3)
    reference = torch.nn.Linear(8, 3)
    reference.load_state_dict(ours.state_dict())
    x, y = _data(50, seed=6)
    train_local(ours, SGD(ours.parameters(), 0.1), x, y, 3, 16, seed=11)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    gen = np.random.default_rng(11)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(3):
        order = torch.from_numpy(gen.permutation(50))
        for start in range(0, 50, 16):
            idx = order[start:start + 16]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(reference(xt[idx]), yt[idx]).backward()
            optimizer.step()
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_evaluation_in_smaller_batches_covers_every_sample():
    """A split over one pass (1024) evaluated in batches of 100 is cut into 15 of them, not into as many as batches
    of the default 256 would make (6, leaving 900 samples out)."""
    torch.manual_seed(6)
    model = torch.nn.Linear(8, 3)
    x, y = _data(1500, seed=7)
    accuracy, loss = evaluate(model, x, y, batch_size=100)
    default = evaluate(model, x, y)
    assert accuracy == default[0] and loss == pytest.approx(default[1], rel=1e-6)
