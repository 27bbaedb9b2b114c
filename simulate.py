"""Run a federated simulation: `python simulate.py [key=value ...]`, or sweep with `-m`.

Hydra composes conf/config.yaml with the overrides; fl.run validates it, runs it and writes one
row per round to <results.dir>/<config_hash>/rounds.csv.
"""
import gc
import os
import signal
import sys
import traceback

import fl  # first: it refuses a Python whose standard library our compression/ would hide

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from fl.config import ConfigError, check_composed_switches, check_switches, register_schema
from fl.errors import RunInProgress
from fl.sweep import UNFINISHED, unfinished

register_schema()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> str | None:
    """Runs one cell; in a sweep, returns how a cell that did not finish ended (None: it finished)."""
    if HydraConfig.get().job.chdir:  # relative paths resolve against where the command ran, as documented, not
        os.chdir(HydraConfig.get().runtime.cwd)  # in the sweep's record, where a rerun would never find its rows
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    overrides = list(HydraConfig.get().overrides.task) if multirun else []
    try:
        check_switches(HydraConfig.get().overrides.task)  # what the composed config no longer shows: switch=2
        check_composed_switches(HydraConfig.get().runtime)  # and in the YAML files composed: a preset's `client: 2`
        fl.run(cfg, keep_warm=multirun)  # a sweep's cells share one Ray and one warm pool (fl/runtime/warm.py)
    except RunInProgress as err:  # another process is running this cell into the same folder: left to it
        print(f"fedsqueeze: not run: {err}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        print("fedsqueeze: this cell is left to that process; the sweep goes on", file=sys.stderr)
        return unfinished("left to another process", overrides)
    except ConfigError as err:  # refused before any work: no rows written
        print(f"fedsqueeze: configuration refused: {err}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        # A sweep's cells were all validated before the first ran (hydra/sweeper=checked): what is refused here
        # needs the data (a split it cannot give). The other cells run; exiting here would end the sweep, or the
        # Ray task of a ray_cells cell.
        print("fedsqueeze: this cell is refused; the sweep goes on", file=sys.stderr)
        return unfinished("refused", overrides)
    except Exception:
        if not multirun:
            raise
        # In a sweep one crashed cell must not stop the others: it is recorded (failed-*.txt beside its
        # rows, listed by experiments.report) and rerunning the same command retries it.
        traceback.print_exc()
        print("fedsqueeze: this cell failed; the sweep goes on", file=sys.stderr)
        return unfinished("failed", overrides)
    return None


def _terminated(signum, frame):
    """SIGTERM (`kill`, a scheduler's time limit or preemption) ends the run as Ctrl-C does, through its handlers:
    the round waiting for its evaluation is written, `failed-<run_id>.txt` says how it ended. Python's default
    ends the process at once, losing that round's row. (With backend=ray, Ray's own handler does the same.)"""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: one line, not the trace of whatever torch was doing
        print("fedsqueeze: interrupted. Finished runs are kept, and the interrupted run's rows as "
              "rounds.incomplete-<run_id>.csv on the rerun; rerun the command to resume (finished runs are skipped; "
              "an unfinished one starts again from round 0)", file=sys.stderr)
        for line in UNFINISHED:  # cells of the sweep that had already ended without finishing
            print(f"  also did not finish: {line}", file=sys.stderr)
        sys.exit(130)
    if UNFINISHED:  # a sweep with cells that did not finish: say which, and exit 1 (rerun to resume)
        again = any(line.startswith("refused:") for line in UNFINISHED)
        print(f"fedsqueeze: {len(UNFINISHED)} cell(s) of the sweep did not finish; rerun the command to retry"
              f"{' (a refused cell is refused again until its configuration changes)' if again else ''}:",
              file=sys.stderr)
        for line in UNFINISHED:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    # The process ends here: keep its long-lived objects (torch, Ray, Hydra) out of the final garbage
    # collection, a noticeable part of a short run's wall time.
    gc.freeze()
