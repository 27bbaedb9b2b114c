"""`hydra/sweeper=checked` (the default): Hydra's basic sweeper, except that every cell's configuration is checked
by fl.config.validate before the first cell runs, so a sweep with a refused cell fails before any work, naming
every refused cell; and that the cells which did not finish are read from what they returned, whichever launcher
ran them, for simulate.py to name at the end.

Hydra loads sweepers only from the `hydra_plugins` namespace, hence this module; its config is
conf/hydra/sweeper/checked.yaml. Checks that need the data (a split it cannot give) still come when a cell runs.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import filter_overrides
from omegaconf import open_dict


class CheckedSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        """Hydra's sweep, then fl.sweep.UNFINISHED from what every cell returned, which simulate.py names at the end:
        a launcher that runs the cells in other processes (submitit's) leaves this process's list empty."""
        from fl.sweep import UNFINISHED

        self.refuse_empty_sweeps(arguments)
        returns = super().sweep(arguments)
        UNFINISHED[:] = [f"{ret.return_value}: {' '.join(ret.overrides)}" for batch in returns for ret in batch
                         if isinstance(ret.return_value, str)]
        return returns

    def refuse_empty_sweeps(self, arguments: list[str]) -> None:
        """A swept key with no values (a glob() that matches no option, an empty range()) makes a sweep of no cells,
        which Hydra launches and exits 0 on, as if it had run: exit 2 naming it, before anything is written."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        # as in Hydra's split_arguments: a key's last override (the command line's, after the sweeper's params) counts
        swept = {o.get_key_element(): o for o in parser.parse_overrides(self._parse_config() + list(arguments))}
        empty = [o.input_line for o in swept.values() if o.is_discrete_sweep() and not list(o.sweep_string_iterator())]
        if empty:
            print("fedsqueeze: configuration refused: the sweep has no cells; no values in:", *empty,
                  file=sys.stderr)
            sys.exit(2)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Compose each cell (Hydra's own check) and validate it; exit 2 listing the refused cells, if any."""
        from fl.config import ConfigError, check_composed_switches, check_switches, validate

        refused = []
        for overrides in batch:
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            runtime = config.hydra.runtime  # the chosen presets: their switches are checked as the task checks them
            with open_dict(config):
                del config["hydra"]  # the cell's task sees its config without Hydra's own node
            try:
                check_switches(overrides)
                check_composed_switches(runtime)
                validate(config)
            except ConfigError as err:
                refused.append(f"  {' '.join(filter_overrides(overrides))}: {err}")
        if refused:
            print(f"fedsqueeze: configuration refused for {len(refused)} of {len(batch)} cells; none ran:",
                  *refused, sep="\n", file=sys.stderr)
            sys.exit(2)
