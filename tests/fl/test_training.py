"""Local SGD (momentum, weight decay, FedProx's proximal term) and evaluation split across workers."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import fl
from fl.config import ConfigError, as_dict, validate
from fl.models import build_model
from fl.plan import Plan
from fl.runtime.pool import InlinePool
from fl.results import config_hash
from fl.simulation import Evaluator
from fl.training import SGD, evaluate, score, train_local


def _pair(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    b = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.0, 1e-2), (0.9, 1e-5)])
def test_sgd_takes_the_steps_of_torch_optim_sgd(momentum, weight_decay):
    ours, reference = _pair()
    x, y = torch.randn(96, 8), torch.randint(0, 3, (96,))
    train_local(ours, SGD(ours.parameters(), 0.05, momentum, weight_decay), x, y, 2, 16, seed=3)
    train_local(reference, torch.optim.SGD(reference.parameters(), lr=0.05, momentum=momentum,
                                           weight_decay=weight_decay), x, y, 2, 16, seed=3)
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_momentum_restarts_with_each_clients_training():
    """No velocity crosses clients: a second client trains as if its optimizer were new."""
    shared, fresh = _pair()
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    optimizer = SGD(shared.parameters(), 0.05, momentum=0.9)
    start = [p.detach().clone() for p in shared.parameters()]
    train_local(shared, optimizer, x, y, 1, 16, seed=1)  # client A leaves velocity behind
    with torch.no_grad():
        for p, s in zip(shared.parameters(), start):
            p.copy_(s)
    train_local(shared, optimizer, x[:32], y[:32], 1, 16, seed=2)  # client B from the same start
    train_local(fresh, SGD(fresh.parameters(), 0.05, momentum=0.9), x[:32], y[:32], 1, 16, seed=2)
    for p, q in zip(shared.parameters(), fresh.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_momentum_and_weight_decay_are_checked_and_leave_the_config_hash_alone_at_zero():
    base = validate(fl.compose(["secagg=none"]))
    explicit = validate(fl.compose(["secagg=none", "fl.momentum=0.0", "fl.weight_decay=0.0"]))
    assert config_hash(as_dict(base)) == config_hash(as_dict(explicit))
    plain = as_dict(base)
    for key in ("momentum", "weight_decay"):
        del plain["fl"][key]  # a run recorded before the keys existed
    del plain["model"]["padding"], plain["dataset"]["system_dirs"], plain["dataset"]["cache"]
    assert config_hash(plain) == config_hash(as_dict(base))
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.momentum=0.9"])))) != config_hash(plain)
    for bad in ("fl.momentum=1.0", "fl.momentum=-0.1", "fl.weight_decay=-1e-5"):
        with pytest.raises(ConfigError, match="momentum"):
            validate(fl.compose([bad]))


def _fedprox_by_its_loss(model, x, y, mu, momentum, epochs, batch_size, seed):
    """FedProx as Li et al. write it: torch.optim.SGD on the loss plus mu / 2 * |w - w0|^2, w0 the start."""
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    gen = np.random.default_rng(seed)
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(len(y)))
        for first in range(0, len(y), batch_size):
            idx = order[first:first + batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss = loss + mu / 2 * sum(((p - s) ** 2).sum() for p, s in zip(model.parameters(), start))
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize("mu,momentum", [(0.01, 0.0), (1.0, 0.0), (0.1, 0.9)])
def test_prox_mu_trains_fedprox_local_objective(mu, momentum):
    ours, reference = _pair()
    x, y = torch.randn(96, 8), torch.randint(0, 3, (96,))
    train_local(ours, SGD(ours.parameters(), 0.05, momentum, prox_mu=mu), x, y, 2, 16, seed=3)
    _fedprox_by_its_loss(reference, x, y, mu, momentum, 2, 16, seed=3)
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_prox_mu_holds_each_client_nearer_its_own_start():
    """The larger mu, the shorter a client's update; each client's anchor is the model it started from, not the
    previous client's: a second client trains as with a new optimizer."""
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    moved = []
    for mu in (0.0, 0.5, 5.0):
        model, _ = _pair()
        start = torch.cat([p.detach().flatten() for p in model.parameters()])
        train_local(model, SGD(model.parameters(), 0.1, prox_mu=mu), x, y, 3, 8, seed=1)
        moved.append(float((torch.cat([p.detach().flatten() for p in model.parameters()]) - start).norm()))
    assert moved[0] > moved[1] > moved[2] > 0
    shared, fresh = _pair(seed=1)
    optimizer = SGD(shared.parameters(), 0.1, prox_mu=1.0)
    train_local(shared, optimizer, x, y, 1, 8, seed=1)  # client A ends elsewhere; client B starts from there
    with torch.no_grad():
        for p, q in zip(fresh.parameters(), shared.parameters()):
            p.copy_(q)
    train_local(shared, optimizer, x[:32], y[:32], 1, 8, seed=2)
    train_local(fresh, SGD(fresh.parameters(), 0.1, prox_mu=1.0), x[:32], y[:32], 1, 8, seed=2)
    for p, q in zip(shared.parameters(), fresh.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_prox_mu_is_checked_reaches_the_workers_and_leaves_the_config_hash_alone_at_zero():
    base = as_dict(validate(fl.compose(["secagg=none"])))
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.prox_mu=0"])))) == config_hash(base)
    del base["fl"]["prox_mu"]  # a run recorded before the key existed
    assert config_hash(base) == config_hash(as_dict(validate(fl.compose(["secagg=none"]))))
    prox = validate(fl.compose(["secagg=none", "fl.prox_mu=0.01"]))
    assert config_hash(as_dict(prox)) != config_hash(base)
    assert Plan.build(prox, [10]).training.prox_mu == 0.01
    for bad in ("fl.prox_mu=-0.1", "fl.prox_mu=inf", "fl.prox_mu=nan"):
        with pytest.raises(ConfigError, match="fl.prox_mu"):
            validate(fl.compose([bad]))


def test_a_run_with_prox_mu_trains_its_clients_by_it(tmp_path):
    """The workers' optimizer gets fl.prox_mu: a strong pull to the global model shortens every round's update."""
    norms = {}
    for mu in (0.0, 10.0):
        rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=2",
                                  "secagg=none", "compression=none", f"fl.prox_mu={mu}"]))
        norms[mu] = rows["update_norm_max"].to_numpy()
    assert (norms[10.0] < norms[0.0]).all()


def test_lenet_with_valid_padding_is_the_niid_bench_cnn():
    model = build_model(OmegaConf.create({"name": "lenet", "channels": [6, 16], "hidden": [120, 84],
                                          "padding": "valid"}), (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) == 44_426  # 16*4*4 = 256 features into 120-84-10
    assert validate(fl.compose(["+experiment=niid_bench", "secagg=none"])).fl.momentum == 0.9
    with pytest.raises(ConfigError, match="padding"):
        validate(fl.compose(["model=lenet", "model.padding=full"]))


@pytest.mark.parametrize("workers,n", [(2, 5000), (3, 5000), (7, 5000), (30, 5000), (1, 5000), (2, 360)])
def test_evaluation_split_across_workers_gives_the_figures_of_one_process(workers, n):
    """5000 samples: twenty evaluation batches of up to 256; 360 (digits' test split): one pass, one worker."""
    from fl.data import Dataset

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 64)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    data = Dataset(x[:100], y[:100], x, y, 10)
    cfg = validate(fl.compose(["model=mlp_small", "secagg=none", "backend=inline", "fl.num_clients=10"]))
    pool = InlinePool("cpu", workers)
    pool.attach(data, Plan.build(cfg, [p.numel() for p in build_model(cfg.model, (64,), 10).parameters()]))
    torch.manual_seed(1)
    model = build_model(cfg.model, (64,), 10)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    expected = score(model, x, y)
    evaluator = Evaluator(pool, workers, n)
    assert len(evaluator.ranges) == min(workers, 20 if n > 1024 else 1)
    assert evaluator(weights) == expected  # exactly: whole batches, summed in batch order


@pytest.mark.parametrize("n", [300, 1500])  # one pass; six batches of up to 256
def test_evaluation_gives_the_accuracy_and_the_mean_cross_entropy_over_every_sample(n):
    model, _ = _pair(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int64)
    accuracy, loss = evaluate(model, x, y)
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).double()
    target = torch.from_numpy(y)
    assert accuracy == float((logits.argmax(1) == target).double().mean())
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, target)), rel=1e-6)


def test_the_mean_loss_of_a_blown_up_model_is_its_number_where_float32s_sum_would_overflow():
    """A model whose weights are finite but huge (a run at fl.lr=100) has finite logits of ~1e37 and per-sample
    losses of ~1e37: their float32 sum overflows, and the row's loss read inf where the mean is a number. Logits
    that overflow themselves still give NaN/Inf (the model's own output is not a number)."""
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1e37, 0.0], [-1e37, 0.0]]))
        model.bias.zero_()
    x = np.ones((300, 2), np.float32)
    y = np.ones(300, np.int64)  # the class whose logit is -1e37: each sample's loss is 2e37
    accuracy, loss = evaluate(model, x, y)
    assert accuracy == 0.0 and loss == pytest.approx(2e37, rel=1e-6)
    with torch.no_grad():
        model.weight.mul_(1e2)  # logits of +-1e39: inf in float32
    assert not np.isfinite(evaluate(model, x, y)[1])


def test_a_model_whose_logits_are_nan_is_right_about_no_sample():
    """Logits that overflow inside the model become NaN (inf - inf); argmax names a NaN's class, class 0 where
    every logit is NaN, so a run at fl.lr=150 read accuracy 0.097 (the test split's share of class 0)."""
    class Scaled(torch.nn.Module):  # logits times `scale`: inf * 0 is NaN
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(1.0))

        def forward(self, x):
            return x * self.scale

    model = Scaled()
    x = np.tile(np.array([[0.0, 1.0, 0.0]], np.float32), (30, 1))
    y = np.ones(30, np.int64)
    assert evaluate(model, x, y)[0] == 1.0
    with torch.no_grad():
        model.scale.fill_(float("inf"))  # every row: [NaN, inf, NaN]
    accuracy, loss = evaluate(model, x, y)
    assert accuracy == 0.0 and np.isnan(loss)
    y[:] = 0  # class 0, the NaN's: argmax names it
    assert evaluate(model, x, y)[0] == 0.0
    scores = score(model, x, y)  # no class predicted, no spread to speak of
    assert scores.top_class_share == 0.0 and np.isnan(scores.logit_std)


@pytest.mark.parametrize("n", [300, 1500])  # one pass; six batches of up to 256
def test_a_rounds_logit_spread_and_top_class_are_those_of_every_samples_logits(n):
    """As experiments.activations computes them from a saved model: each logit's std across the images
    (population) averaged over the classes, and the largest share of the images given one class."""
    model, _ = _pair(3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int64)
    scores = score(model, x, y)
    assert scores[:2] == evaluate(model, x, y)
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).double().numpy()
    assert scores.logit_std == pytest.approx(logits.std(0).mean(), rel=1e-9)
    assert scores.top_class_share == np.bincount(logits.argmax(1), minlength=3).max() / n
    with torch.no_grad():  # dead features: no hidden unit ever positive, so the logits are the last bias
        model[0].bias.fill_(-100.0)
    dead = score(model, x, y)
    assert dead.logit_std == 0.0 and dead.top_class_share == 1.0


def test_local_training_runs_every_epoch_over_every_sample():
    model, _ = _pair(4)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 8)).astype(np.float32)
    y = rng.integers(0, 3, 50).astype(np.int64)
    seen, steps = [], []
    model.register_forward_hook(lambda module, inputs, output: seen.extend(inputs[0].shape[:1]))
    for epochs in (1, 3):
        steps.append(train_local(model, SGD(model.parameters(), 0.05), x, y, epochs, 16, seed=0))
    assert steps == [4, 12]  # batches of 16, 16, 16 and 2, each epoch
    assert seen == [16, 16, 16, 2] * 4
