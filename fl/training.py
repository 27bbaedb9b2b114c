"""Local training and evaluation on one resident model (no copies per client)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


def train_local(model: nn.Module, optimizer: torch.optim.Optimizer, x: np.ndarray, y: np.ndarray,
                epochs: int, batch_size: int, seed: int, device: str = "cpu") -> int:
    """Run `epochs` of minibatch SGD on (x, y); batch order from `seed` alone. Returns samples seen."""
    gen = np.random.default_rng(seed)
    xt = torch.from_numpy(x).to(device)
    yt = torch.from_numpy(y).to(device)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    seen = 0
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(len(x)))
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            optimizer.step()
            seen += len(idx)
    return seen


@torch.no_grad()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, device: str = "cpu",
             batch_size: int = 1024) -> tuple[float, float]:
    """(accuracy, mean cross-entropy loss) on a held-out split."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb = torch.from_numpy(x[start:start + batch_size]).to(device)
        yb = torch.from_numpy(y[start:start + batch_size]).to(device)
        out = model(xb)
        loss_sum += float(nn.functional.cross_entropy(out, yb, reduction="sum"))
        correct += int((out.argmax(1) == yb).sum())
    return correct / len(x), loss_sum / len(x)
