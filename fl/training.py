"""Local training and evaluation on one resident model (no copies per client).

Data may be numpy arrays (moved to `device` per call) or torch tensors already on the device, so a
worker can move its data and model once and run every client from there.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


def as_tensor(a: np.ndarray | torch.Tensor, device: str | torch.device = "cpu") -> torch.Tensor:
    """`a` on `device`: a tensor already there is returned as is (no copy)."""
    if isinstance(a, torch.Tensor):
        return a.to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def seed_torch(seed: int, device: str | torch.device = "cpu") -> None:
    """Seed torch's generator on `device` (for models with randomness in their forward pass, e.g. dropout).

    torch.manual_seed would also queue lazy seeding for CUDA/XPU/MTIA, recording a Python stack trace
    each time (about 0.6 ms a call without those devices): once per client per round, that was a
    tenth of a small model's round. Same CPU stream as torch.manual_seed.
    """
    torch.random.default_generator.manual_seed(int(seed))
    if torch.device(device).type == "cuda":
        torch.cuda.manual_seed(int(seed))


class SGD:
    """Plain minibatch SGD, p -= lr * grad: what local training needs, without torch.optim, whose first
    construction imports torch._dynamo (about 2 s per worker process at start-up)."""

    def __init__(self, params, lr: float):
        self.params, self.lr = [p for p in params if p.requires_grad], float(lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


def train_local(model: nn.Module, optimizer: SGD | torch.optim.Optimizer, x: np.ndarray | torch.Tensor,
                y: np.ndarray | torch.Tensor, epochs: int, batch_size: int, seed: int, device: str = "cpu") -> int:
    """Run `epochs` of minibatch SGD on (x, y); batch order from `seed` alone. Returns samples seen."""
    gen = np.random.default_rng(seed)
    xt, yt = as_tensor(x, device), as_tensor(y, device)
    n = len(yt)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    seen = 0
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(n)).to(xt.device)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            optimizer.step()
            seen += len(idx)
    return seen


@torch.inference_mode()
def evaluate(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: str = "cpu",
             batch_size: int = 1024) -> tuple[float, float]:
    """(accuracy, mean cross-entropy loss) on a held-out split."""
    if model.training:  # the driver's model only ever evaluates: switched once, not every round
        model.eval()
    n = len(y)
    if n <= batch_size:  # one batch (digits' 360 test samples): no accumulators, a quarter less time
        xb, yb = as_tensor(x, device), as_tensor(y, device)
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb, reduction="sum")
        return int((out.argmax(1) == yb).sum()) / n, float(loss.double()) / n
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, n, batch_size):  # batch by batch: numpy data moves one batch at a time
        xb = as_tensor(x[start:start + batch_size], device)
        yb = as_tensor(y[start:start + batch_size], device)
        out = model(xb)
        loss_sum += nn.functional.cross_entropy(out, yb, reduction="sum").double()
        correct += (out.argmax(1) == yb).sum()
    return int(correct) / n, float(loss_sum) / n  # one device sync, at the end
