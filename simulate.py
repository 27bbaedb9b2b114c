"""Run a federated simulation: `python simulate.py [key=value ...]`, or sweep with `-m`.

Hydra composes conf/config.yaml with the overrides; fl.run validates it, runs it and writes one
row per round to <results.dir>/<config_hash>/rounds.csv.
"""
import sys

import hydra
from omegaconf import DictConfig

import fl
from fl.config import ConfigError, register_schema

register_schema()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        fl.run(cfg)
    except ConfigError as err:  # refused before any work: no rows written
        print(f"fedsqueeze: configuration refused: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
