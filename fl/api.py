"""The Python API, keeping the older framework's call working:

    fl.run_server(mask_protocol='DHProtocol', compression_protocol='TopKProtocol',
                  server_with_compression=True, client_with_compression=True, compress_ratio=0.5,
                  rounds=5, backend='inline', **{'dataset.partition': 'dirichlet'})
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

import compression
import secagg
from fl.config import ConfigError, FLConfig, check_composed_switches, check_switch, check_switches, register_schema

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
_FL_KEYS = {f.name for f in fields(FLConfig)}


def compose(overrides: list[str] | None = None) -> DictConfig:
    """The Hydra config that `python simulate.py <overrides>` would run."""
    from hydra import compose as hydra_compose, initialize_config_dir

    check_switches(overrides or [])
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides or []), return_hydra_config=True)
    check_composed_switches(cfg.hydra.runtime)
    with open_dict(cfg):  # what hydra_compose returns without return_hydra_config
        del cfg["hydra"]
    return cfg


def build_config(mask_protocol: str | None = "DHProtocol", compression_protocol: str | None = "TopKProtocol",
                 server_with_compression: bool | None = None, client_with_compression: bool | None = None,
                 compress_ratio: float = 0.5, **other_config: Any) -> DictConfig:
    """Map the seed framework's names onto the config; a protocol of None is 'none' (off). The switches of
    None keep the codec's preset (conf/compression/<name>.yaml: both on, but qsgd's broadcast, which diverges).
    Other keys: dotted paths ('dataset.alpha'), a section as a dict (`results={'dir': 'out'}`), `fl` fields by
    their short name (`rounds`, `num_clients`, ...), top-level keys (`seed`, `backend`) or the `model` or `dataset`
    group by option name (`model='mlp_small'`). A key is given once: a second spelling of it (`compress_ratio` and
    `compression={'ratio': ...}`) is refused, not silently preferred."""
    for group, switch in (("secagg", "mask_protocol"), ("compression", "compression_protocol")):
        if isinstance(other_config.get(group), str):  # these two groups are chosen by the seed framework's switches
            raise ConfigError(f"{group}={other_config[group]!r}: choose it with {switch}={other_config[group]!r}")
    try:
        groups = [_protocol("secagg", secagg.canonical("none" if mask_protocol is None else mask_protocol)),
                  _protocol("compression",
                            compression.canonical("none" if compression_protocol is None else compression_protocol))]
    except (secagg.UnknownProtocolError, compression.UnknownProtocolError) as err:
        raise ConfigError(str(err)) from None
    groups += [f"{key}={other_config.pop(key)}" for key in ("dataset", "model")
               if isinstance(other_config.get(key), str)]  # a config group chosen by name, e.g. model='mlp_small'
    try:
        cfg = compose(groups)
    except Exception as err:  # an unknown model or dataset name: Hydra's message lists the options
        raise ConfigError(" ".join(str(err).split()).split(" Config search path")[0]) from None
    values, spelled = {"compression.ratio": compress_ratio}, {"compression.ratio": "compress_ratio"}
    for key, name, switch in (("compression.server", "server_with_compression", server_with_compression),
                              ("compression.client", "client_with_compression", client_with_compression)):
        if switch is not None:
            values[key], spelled[key] = switch, name
    for name, value in _dotted(other_config):
        key = f"fl.{name}" if name in _FL_KEYS else name
        if key in ("secagg.name", "compression.name"):  # the switches choose these, with their presets
            switch = "mask_protocol" if key == "secagg.name" else "compression_protocol"
            raise ConfigError(f"{name}={value!r}: choose it with {switch}={value!r}")
        if key in ("model.name", "dataset.name"):
            raise ConfigError(f"{name}={value!r}: choose it with {key.split('.')[0]}={value!r} ({key} renames the "
                              "chosen option and keeps its other keys)")
        if key in spelled:  # two spellings of one key: neither may silently win
            raise ConfigError(f"{key} is given twice, as {spelled[key]}={values[key]!r} and as {name}={value!r}: "
                              f"give it once")
        values[key], spelled[key] = value, name
    for key, value in values.items():
        if isinstance(value, np.generic):  # np.linspace's or an array's element: OmegaConf takes Python scalars only
            value = value.item()
        check_switch(key, value)
        try:
            # struct mode: an unknown key raises, but for a codec option, a key of its own (`+compression.options.X`
            # on the command line), checked by the codec when the config is validated
            OmegaConf.update(cfg, key, value, merge=False, force_add=key.startswith("compression.options."))
        except Exception as err:
            raise ConfigError(f"cannot set {key}={value!r}: {err}") from None
    return cfg


def _protocol(group: str, name: str) -> str:
    """The override choosing a registered protocol: its preset (`group=name`) where conf/<group>/<name>.yaml
    exists, else the default preset with `group.name=name` (a codec registered without a yaml, as
    docs/adding_a_codec.md allows)."""
    return f"{group}={name}" if (CONF_DIR / group / f"{name}.yaml").exists() else f"{group}.name={name}"


def _dotted(values: dict, prefix: str = ""):
    """(dotted key, value) pairs: a dict value is a section, its keys set one by one (the rest keep their
    defaults), not a replacement of the whole section."""
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def run_server(mask_protocol: str | None = "DHProtocol", compression_protocol: str | None = "TopKProtocol",
               server_with_compression: bool | None = None, client_with_compression: bool | None = None,
               compress_ratio: float = 0.5, **other_config: Any) -> pd.DataFrame:
    """Run one simulation with the seed framework's switches; returns its per-round rows."""
    from fl.launch import run

    return run(build_config(mask_protocol, compression_protocol, server_with_compression,
                            client_with_compression, compress_ratio, **other_config))
