"""Typed configuration: the schema Hydra composes into, and the checks that run before any work.

The dataclasses are registered with Hydra's ConfigStore as the schema of `conf/config.yaml`, so a
typo'd key fails at composition. `validate` adds the checks a schema cannot express (protocol
names, ratio range, fixed-point overflow) and runs before a single row is written.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

import compression
import secagg


@dataclass
class FLConfig:
    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 20
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.1
    eval_every: int = 1


@dataclass
class DatasetConfig:
    name: str = "digits"
    partition: str = "iid"          # iid | dirichlet
    alpha: float = 0.5              # Dirichlet concentration (smaller = more skewed)
    test_fraction: float = 0.2
    root: str = "data"


@dataclass
class ModelConfig:
    name: str = "mlp_large"
    hidden: list[int] = field(default_factory=lambda: [1024, 420])


@dataclass
class CompressionConfig:
    name: str = "topk"
    ratio: float = 0.5
    client: bool = True
    server: bool = True
    error_feedback: bool = True
    index_policy: str = "sketch"    # sketch | randk | prev_topk (only with masking and client compression)
    sketch_rows: int = 1
    sketch_cols_per_k: float = 2.0  # sketch columns as a multiple of k
    prev_topk_random: float = 0.1   # prev_topk: share of k drawn at random
    residual_dtype: str = "float32"  # float32 | float16: storage of error-feedback residuals between rounds


@dataclass
class SecAggConfig:
    name: str = "dh"
    clip: float = 0.5               # fixed-point clip of the (weighted) update values
    sketch_clip: float = 4.0        # clip of the count-sketch cells
    max_weight: float = 8.0         # FedAvg weight (local samples / mean samples) is capped here


@dataclass
class ResultsConfig:
    dir: str = "results/runs"


@dataclass
class RayConfig:
    address: Optional[str] = None   # null: start a local Ray; "auto": join a running cluster
    num_workers: Optional[int] = None  # null: one per CPU core
    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float = 0.0


@dataclass
class Config:
    seed: int = 0
    backend: str = "ray"            # ray | inline
    device: str = "cpu"
    fl: FLConfig = field(default_factory=FLConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    secagg: SecAggConfig = field(default_factory=SecAggConfig)
    results: ResultsConfig = field(default_factory=ResultsConfig)
    ray: RayConfig = field(default_factory=RayConfig)


class ConfigError(ValueError):
    """A configuration that must not run."""


def register_schema() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="fedsqueeze_schema", node=Config)


INDEX_POLICIES = ("sketch", "randk", "prev_topk")
MODELS = ("mlp_small", "mlp_large")
DATASETS = ("digits",)


def validate(cfg: DictConfig | Config) -> DictConfig:
    """Refuse a configuration before any work: returns the typed config with canonical protocol names."""
    schema = OmegaConf.structured(Config)
    OmegaConf.set_struct(schema, True)
    try:  # unknown keys (even ones forced in with `+key=`) and wrong types raise here
        plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
        typed = OmegaConf.merge(schema, plain)
    except Exception as err:
        raise ConfigError(str(err).splitlines()[0]) from None
    c = typed
    try:
        c.compression.name = compression.canonical(c.compression.name)
        c.secagg.name = secagg.canonical(c.secagg.name)
    except (compression.UnknownProtocolError, secagg.UnknownProtocolError) as err:
        raise ConfigError(str(err)) from None
    r = c.compression.ratio
    if not (isinstance(r, (int, float)) and math.isfinite(r) and 0 < r <= 1):
        raise ConfigError(f"compression.ratio must be in (0, 1], got {r}")
    if c.backend not in ("ray", "inline"):
        raise ConfigError(f"backend must be 'ray' or 'inline', got {c.backend!r}")
    if c.dataset.name not in DATASETS:
        raise ConfigError(f"unknown dataset {c.dataset.name!r}; available: {', '.join(DATASETS)}")
    if c.dataset.partition not in ("iid", "dirichlet"):
        raise ConfigError(f"dataset.partition must be 'iid' or 'dirichlet', got {c.dataset.partition!r}")
    if c.dataset.partition == "dirichlet" and not c.dataset.alpha > 0:
        raise ConfigError(f"dataset.alpha must be > 0, got {c.dataset.alpha}")
    if c.model.name not in MODELS:
        raise ConfigError(f"unknown model {c.model.name!r}; available: {', '.join(MODELS)}")
    if c.compression.index_policy not in INDEX_POLICIES:
        raise ConfigError(
            f"unknown compression.index_policy {c.compression.index_policy!r}; available: {', '.join(INDEX_POLICIES)}")
    f = c.fl
    if f.num_clients < 1 or not 1 <= f.clients_per_round <= f.num_clients:
        raise ConfigError(
            f"need 1 <= fl.clients_per_round <= fl.num_clients, got {f.clients_per_round} and {f.num_clients}")
    for key in ("rounds", "local_epochs", "batch_size", "eval_every"):
        if getattr(f, key) < 1:
            raise ConfigError(f"fl.{key} must be >= 1, got {getattr(f, key)}")
    if not f.lr > 0:
        raise ConfigError(f"fl.lr must be > 0, got {f.lr}")
    if c.compression.residual_dtype not in ("float32", "float16"):
        raise ConfigError(f"compression.residual_dtype must be float32 or float16, got {c.compression.residual_dtype!r}")
    if c.compression.sketch_rows < 1 or not c.compression.sketch_cols_per_k > 0:
        raise ConfigError("compression.sketch_rows must be >= 1 and sketch_cols_per_k > 0")
    if secagg.get(c.secagg.name).masks:
        if f.clients_per_round < 2:
            raise ConfigError("secure aggregation needs fl.clients_per_round >= 2 (one client's sum is its input)")
        for key in ("clip", "sketch_clip", "max_weight"):
            if not getattr(c.secagg, key) > 0:
                raise ConfigError(f"secagg.{key} must be > 0")
        try:  # the field sum of clients_per_round inputs must not wrap: checked here, not mid-run
            secagg.FixedPointQuantizer(c.secagg.clip, f.clients_per_round)
        except ValueError as err:
            raise ConfigError(f"secagg: {err}") from None
    return typed


def as_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
