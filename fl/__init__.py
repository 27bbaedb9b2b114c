"""The federated loop: data, models, local training, workers, server, wire and results.

`fl.run_server(...)` keeps the older framework's call; `fl.run(cfg)` runs a composed Hydra config.
The names below load on first use, so a Ray worker importing `fl.runtime.worker` does not pay for
pandas and Hydra at its start.
"""
import sys

if sys.version_info >= (3, 14):  # checked before anything imports gzip, which 3.14 builds on its own `compression`
    raise ImportError("fedsqueeze runs on Python 3.10-3.13: 3.14's standard library has a package named compression "
                      "(PEP 784), which this project's top-level compression/ hides (gzip, and pandas with it, would "
                      "then fail to import)")

from fl.errors import ConfigError  # noqa: E402

_API = ("build_config", "compose", "run_server")


def run(cfg, keep_warm: bool = False):
    """Validate and run one configuration; returns its per-round rows (a pandas DataFrame). `keep_warm`:
    keep Ray, the worker pool and the dataset for the next call (a sweep) until fl.runtime.warm.close()."""
    from fl.launch import run as _run

    return _run(cfg, keep_warm)


def __getattr__(name: str):
    if name in _API:
        import fl.api

        return getattr(fl.api, name)
    raise AttributeError(f"module 'fl' has no attribute {name!r}")


__all__ = ["run", "run_server", "build_config", "compose", "ConfigError"]
