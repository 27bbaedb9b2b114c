"""The whole federated loop against an independent FedAvg written here in plain torch and numpy: torch.optim.SGD
on each sampled client's own data, the update weighted by its sample count, top-k with each client's residual
added before selection, the broadcast's top-k of (global - what clients hold), FedAvgM and update clipping.
Only the data, its split and the documented seeds (cohort, batch order) are taken from fedsqueeze."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import fl
import fl.server
from fl.launch import run
from fl.config import validate
from fl.data import load_dataset
from fl.partitions import client_partitions

SETTING = dict(num_clients=6, clients_per_round=3, rounds=3, local_epochs=1, batch_size=10, lr=0.1, momentum=0.9,
               weight_decay=1e-3, server_lr=0.5, server_momentum=0.5, max_update_norm=0.5)


def _cohort(seed, r, num_clients, per_round):  # docs: sampled each round from a generator seeded by (seed, round)
    rng = np.random.default_rng(np.random.SeedSequence([seed, r, 3]))
    return sorted(int(c) for c in rng.choice(num_clients, size=per_round, replace=False))


def _batch_seed(seed, r, cid):  # fl.seeds.client_seed: (seed, round, client id)
    return int(np.random.SeedSequence([seed, r, cid, 7]).generate_state(1, np.uint32)[0])


def _topk(v, ratio):
    k = math.ceil(ratio * v.size)
    out = np.zeros_like(v)
    at = np.argpartition(np.abs(v), v.size - k)[v.size - k:]
    out[at] = v[at]
    return out


def _reference(cfg, ratio, memory=False):
    """`memory`: fl.aggregation=memory, EF21 with MIFA's server as written in the docs: each client sends the top-k
    of (update - its memory) and adds it to its memory; the server keeps the sum of every client's weighted memory
    and steps by its mean over every client it has heard from."""
    s, seed = SETTING, int(cfg.seed)
    data = load_dataset(cfg.dataset, seed)
    parts = client_partitions(cfg, data.y_train)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))  # mlp_small on digits
    params = list(model.parameters())

    def get():
        return torch.cat([p.detach().reshape(-1) for p in params]).numpy().copy()

    def put(v):
        with torch.no_grad():
            at = 0
            for p in params:
                p.copy_(torch.from_numpy(v[at:at + p.numel()]).view_as(p))
                at += p.numel()

    weights, held, buffer, residuals = get(), None, None, {}
    memory_sum, memory_weight = np.zeros(weights.size, np.float64), 0.0
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    losses = []
    for r in range(s["rounds"]):
        held = weights.copy() if held is None else held + _topk(weights - held, ratio)  # the broadcast
        total, weight = np.zeros(weights.size, np.float64), 0.0
        for cid in _cohort(seed, r, s["num_clients"], s["clients_per_round"]):
            put(held)
            opt = torch.optim.SGD(params, lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"])
            order_rng = np.random.default_rng(_batch_seed(seed, r, cid))
            xc, yc = x[parts[cid]], y[parts[cid]]
            for _ in range(s["local_epochs"]):
                order = torch.from_numpy(order_rng.permutation(len(yc)))  # reshuffled every epoch
                for start in range(0, len(yc), s["batch_size"]):  # the last, partial batch included
                    at = order[start:start + s["batch_size"]]
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(xc[at]), yc[at]).backward()
                    opt.step()
            update = get() - held
            norm = math.sqrt(float(np.sum(update.astype(np.float64) ** 2)))
            if norm > s["max_update_norm"]:  # clipped before error feedback; what is cut off is dropped
                update = update * np.float32(s["max_update_norm"] / norm)
            if memory:
                sent = _topk(update - residuals.get(cid, 0), ratio)
                memory_weight += len(yc) if cid not in residuals else 0
                residuals[cid] = residuals.get(cid, 0) + sent
                memory_sum += sent.astype(np.float64) * len(yc)
                continue
            corrected = update + residuals.get(cid, 0)
            sent = _topk(corrected, ratio)
            residuals[cid] = corrected - sent
            total += sent.astype(np.float64) * len(yc)
            weight += len(yc)
        mean = (memory_sum / memory_weight if memory else total / weight).astype(np.float32)
        buffer = mean if buffer is None else np.float32(s["server_momentum"]) * buffer + mean
        weights = weights + np.float32(s["server_lr"]) * buffer
        put(weights)
        with torch.no_grad():
            losses.append(float(nn.functional.cross_entropy(model(torch.from_numpy(data.x_test)),
                                                            torch.from_numpy(data.y_test))))
    return weights, losses


@pytest.mark.parametrize("partition,aggregation", [("iid", "cohort"), ("dirichlet", "cohort"),
                                                   ("dirichlet", "memory")])
def test_the_loop_is_fedavg_weighted_by_samples_with_error_feedback_fedavgm_and_clipping(tmp_path, monkeypatch,
                                                                                        partition, aggregation):
    servers = []
    init = fl.server.Server.__init__
    monkeypatch.setattr(fl.server.Server, "__init__", lambda self, *a: (init(self, *a), servers.append(self))[0])
    ratio = 0.1
    cfg = validate(fl.build_config(mask_protocol=None, compression_protocol="topk", compress_ratio=ratio,
                                   server_with_compression=True, backend="inline", model="mlp_small", seed=3,
                                   dataset={"partition": partition}, results={"dir": str(tmp_path)},
                                   **SETTING, aggregation=aggregation))
    rows = run(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers run
    try:
        weights, losses = _reference(cfg, ratio, memory=cfg.fl.aggregation == "memory")
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(servers[0].weights, weights, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["loss"].to_numpy(), losses, rtol=1e-5)
    assert rows["clipped"].sum() > 0  # the bound acted
