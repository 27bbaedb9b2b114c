"""Local training and evaluation on one resident model (no copies per client).

Data may be numpy arrays (moved to `device` per call) or torch tensors already on the device, so a
worker can move its data and model once and run every client from there.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fl.scores import EVAL_BATCH, Scores, Spread, batch_rows, combine, n_batches


def as_tensor(a: np.ndarray | torch.Tensor, device: str | torch.device = "cpu") -> torch.Tensor:
    """`a` on `device`: a tensor already there is returned as is (no copy)."""
    if isinstance(a, torch.Tensor):
        return a.to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def seed_torch(seed: int, device: str | torch.device = "cpu") -> None:
    """Seed torch's generator on `device` (for models with randomness in their forward pass, e.g. dropout).

    torch.manual_seed would also queue lazy seeding for CUDA/XPU/MTIA, recording a Python stack trace
    each time, once per client per round. Same CPU stream as torch.manual_seed.
    """
    torch.random.default_generator.manual_seed(int(seed))
    if torch.device(device).type == "cuda":
        torch.cuda.manual_seed(int(seed))


class SGD:
    """Minibatch SGD with optional momentum and L2 weight decay (torch.optim.SGD's update rule), without
    torch.optim, whose first construction imports torch._dynamo (seconds per worker process at start-up).

    Momentum buffers start empty for each client's local training (`reset`), as a client that builds its
    optimizer on every call does (Flower's niid_bench does): no state crosses clients or rounds.

    prox_mu > 0 is FedProx's local objective (Li et al. 2020): the loss plus prox_mu / 2 * |w - w0|^2, w0 the
    weights at `reset` (the global model a client starts from), so the gradient gains prox_mu * (w - w0), added
    where weight decay is, before momentum. At 0 nothing is added: FedAvg's local SGD, to the bit.
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, prox_mu: float = 0.0):
        self.params, self.lr = [p for p in params if p.requires_grad], float(lr)
        self.momentum, self.weight_decay, self.prox_mu = float(momentum), float(weight_decay), float(prox_mu)
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)
        self.anchors: list[torch.Tensor] = []

    def reset(self) -> None:
        self.buffers = [None] * len(self.params)
        if self.prox_mu:
            self.anchors = [p.detach().clone() for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad
            if self.weight_decay:
                grad = grad.add(p, alpha=self.weight_decay)
            if self.prox_mu:
                grad = grad.add(p - self.anchors[i], alpha=self.prox_mu)
            if self.momentum:
                if self.buffers[i] is None:
                    self.buffers[i] = grad.detach().clone()
                else:
                    self.buffers[i].mul_(self.momentum).add_(grad)
                grad = self.buffers[i]
            p.add_(grad, alpha=-self.lr)


def train_local(model: nn.Module, optimizer: SGD | torch.optim.Optimizer, x: np.ndarray | torch.Tensor,
                y: np.ndarray | torch.Tensor, epochs: int, batch_size: int, seed: int, device: str = "cpu",
                max_steps: int | None = None) -> int:
    """Run `epochs` of minibatch SGD on (x, y); batch order from `seed` alone. Returns the steps taken.

    `max_steps` stops after that many minibatch steps (a straggler's partial work: the first steps of its full
    local training, in the same order)."""
    gen = np.random.default_rng(seed)
    if isinstance(optimizer, SGD):
        optimizer.reset()
    xt, yt = as_tensor(x, device), as_tensor(y, device)
    n = len(yt)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    steps = 0
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(n)).to(xt.device)
        for start in range(0, n, batch_size):
            if steps == max_steps:
                return steps
            steps += 1
            idx = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            optimizer.step()
    return steps


@torch.inference_mode()
def evaluate(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: str = "cpu",
             batch_size: int = EVAL_BATCH) -> tuple[float, float]:
    """(accuracy, mean cross-entropy loss) on a held-out split."""
    return score(model, x, y, device, batch_size)[:2]


def score(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: str = "cpu",
          batch_size: int = EVAL_BATCH) -> Scores:
    """A held-out split's `Scores`, as a round records them."""
    return combine(evaluate_batches(model, x, y, 0, n_batches(len(y), batch_size), device, batch_size), len(y))


@torch.inference_mode()
def evaluate_batches(model: nn.Module, x, y, first: int, stop: int, device: str = "cpu",
                     batch_size: int = EVAL_BATCH) -> list[tuple[int, float, Spread]]:
    """(correct, summed loss, the logits' `Spread`) of evaluation batches first..stop-1 (fl.scores cuts the
    split): workers each take a range of batches, and `combine` sums them in batch order, so the result is the
    same however they are split."""
    if model.training:
        model.eval()
    size = batch_rows(len(y), batch_size)
    out = []
    for b in range(first, stop):  # batch by batch: numpy data moves one batch at a time
        xb = as_tensor(x[b * size:(b + 1) * size], device)
        yb = as_tensor(y[b * size:(b + 1) * size], device)
        logits = model(xb)
        loss = nn.functional.cross_entropy(logits, yb, reduction="sum")
        if not torch.isfinite(loss) and torch.isfinite(logits).all():  # float32 overflowed on finite logits
            loss = nn.functional.cross_entropy(logits.double(), yb, reduction="sum")
        # a row with a NaN logit predicts nothing (argmax would name the NaN's class, class 0 when all are NaN)
        finite = ~torch.isnan(logits).any(1)
        predicted = logits.argmax(1)
        right = (predicted == yb) & finite
        wide = logits.double()
        mean = wide.mean(0)
        spread = Spread(len(yb), mean.cpu().numpy(), ((wide - mean) ** 2).sum(0).cpu().numpy(),
                        torch.bincount(predicted[finite], minlength=logits.shape[1]).cpu().numpy())
        out.append((int(right.sum()), float(loss.double()), spread))
    return out
