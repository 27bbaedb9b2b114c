"""Workers attached to a run's data and plan, as the driver attaches them, for tests of the client half."""
from __future__ import annotations

import torch

import fl
from fl.config import validate
from fl.data import load_dataset
from fl.models import build_model
from fl.plan import Plan
from fl.runtime.worker import Worker


def attached_workers(overrides: list[str], n: int = 1):
    """(validated config, plan, [n workers]) for `python simulate.py <overrides>`."""
    cfg = validate(fl.compose(overrides))
    data = load_dataset(cfg.dataset, cfg.seed)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes)
    plan = Plan.build(cfg, [p.numel() for p in model.parameters()])
    workers = [Worker(str(cfg.device), i) for i in range(n)]
    for w in workers:
        w.attach(data, plan)
    return cfg, plan, workers
