"""The federated loop: data, models, local training, workers, server, wire and results.

`fl.run_server(...)` keeps the older framework's call; `fl.run(cfg)` runs a composed Hydra config.
"""
from fl.api import build_config, compose, run_server
from fl.config import ConfigError


def run(cfg):
    from fl.simulation import run as _run

    return _run(cfg)


__all__ = ["run", "run_server", "build_config", "compose", "ConfigError"]
