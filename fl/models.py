"""Models by name and size, and the flat float32 view of their weights that the wire carries."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


def build_model(cfg, num_features: int, num_classes: int) -> nn.Module:
    """`mlp_small` (64-64-10, 4,810 parameters) or `mlp_large` (64-1024-420-10, 501,270) on digits."""
    if not cfg.name.startswith("mlp"):
        raise ValueError(f"unknown model {cfg.name!r}")
    layers: list[nn.Module] = []
    width = num_features
    for h in cfg.hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(nn.Flatten(), *layers)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def get_flat(model: nn.Module) -> np.ndarray:
    """All parameters as one float32 vector (a copy), in `model.parameters()` order."""
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().cpu().numpy().astype(np.float32)


def set_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Copy `flat` into the parameters (a copy: training must never write into the caller's array)."""
    vec = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(vec[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def layout(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of each parameter, in flat-vector order."""
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]
