"""Tidy per-round rows, written as the run goes: `<results.dir>/<config_hash>/rounds.csv`.

A run that finished leaves `done.json` beside its rows (written last, atomically, naming the run and its number of
rows) and is skipped on rerun; rows that do not match their done.json are not a finished run. Rows of a run that
was killed are kept: the next run moves them to `rounds.incomplete-<run_id>.csv` (and their config.json, where the
new run's differs in a key outside the hash, to `config.incomplete-<run_id>.json`) and starts afresh, so nothing
already written is ever overwritten. A run that raised leaves `failed-<run_id>.txt`. While a run
writes, it holds `running.lock` in its folder (an flock), so a second process given the same configuration and
folder (two sweeps that share a cell) is refused instead of moving the first one's rows aside.
"""
from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import inspect
import io
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import compression
import secagg
from fl.errors import RunInProgress

if TYPE_CHECKING:  # pandas loads when rows are read: fl.launch starts Ray before it
    import pandas as pd

LOCK_NAME = "running.lock"  # held by the process writing the folder's rows (RunLog.claim)
MODEL_NAME = "model.npy"  # the final global weights (results.save_model), written before done.json

# Keys that say how a run executes, not what it computes: they do not change the config hash.
EXECUTION_KEYS = ("backend", "ray", "results")

COLUMNS = [
    "run_id", "config_hash", "seed", "dataset", "partition", "model", "n_params", "num_clients",
    "clients_per_round", "compression", "ratio", "client_compression", "server_compression", "error_feedback",
    "aggregation", "index_policy", "secagg", "round", "accuracy", "loss", "logit_std", "top_class_share", "bytes_up",
    "bytes_up_payload", "bytes_up_protocol", "bytes_up_sketch", "bytes_up_per_client", "bytes_down",
    "bytes_down_per_client", "catchups",
    "rejected", "clipped", "update_norm_max", "aborted", "local_steps",
    "dropped", "dropped_advertise", "dropped_share_keys", "dropped_masked_input", "dropped_unmask",
    "dropped_masked_sketch", "dropped_unmask_sketch", "late_ignored",
    "t_setup", "t_broadcast", "t_sync", "t_train", "t_encode", "t_mask", "t_aggregate", "t_unmask", "t_decode",
    "t_evaluate", "t_evaluate_carried", "t_round",
    "t_step_advertise", "t_step_share_keys", "t_step_masked_sketch", "t_step_unmask_sketch", "t_step_masked_input",
    "t_step_unmask", "field_bits",
    "state_bytes", "state_lost_bytes", "driver_peak_mb", "worker_peak_mb",
    "env", "env_cpu", "env_cores", "env_torch", "device", "backend", "num_workers", "code",
]


# Keys added after results were committed, left out of the hash at the value that reproduces those results
# (so a finished run is still found); and keys that say where files are found or when evaluation runs, not
# what is computed.
NEUTRAL = {("fl", "momentum"): 0.0, ("fl", "weight_decay"): 0.0, ("fl", "prox_mu"): 0.0, ("fl", "stragglers"): 0.0,
           ("fl", "straggler_policy"): "keep", ("fl", "server_lr"): 1.0, ("fl", "server_momentum"): 0.0,
           ("fl", "aggregation"): "cohort",
           ("fl", "max_update_norm"): None, ("model", "padding"): "same",
           ("compression", "sketch_quant_bits"): None,
           ("compression", "fresh_summary"): "blocks", ("compression", "block_size"): 64,
           ("dataset", "labels_per_client"): 2}
WHERE_KEYS = (("dataset", "system_dirs"), ("dataset", "cache"),
              ("fl", "eval_overlap"))  # when evaluation runs, not what it computes
FIELD_KEYS = ("quant_bits", "bits")  # the masked field's widths: they compute nothing without masking
# how a masked round chooses its shared index set: nothing without masking and client compression
SHARED_INDEX_KEYS = ("index_policy", "sketch_rows", "sketch_cols_per_k", "prev_topk_random", "sketch_quant_bits",
                     "fresh_summary", "block_size")


def shared_index_keys_used(masks: bool, c: dict) -> set[str]:
    """The shared-index keys a run reads: none without masking and client compression or with a linear codec
    (its table is masked whole); else its index policy's (and `fresh`'s summary's)."""
    name = c.get("name")
    if not masks or name == "none" or not c.get("client", True) or \
            (name is not None and getattr(compression.get(name), "linear", False)):
        return set()
    policy, summary = c.get("index_policy", "fresh"), c.get("fresh_summary", "blocks")  # absent: rows kept before it
    used = {"index_policy"}
    if policy == "fresh":
        used |= {"fresh_summary", "sketch_quant_bits"} | ({"block_size"} if summary == "blocks" else set())
    if policy == "sketch" or (policy == "fresh" and summary == "sketch"):
        used |= {"sketch_rows", "sketch_cols_per_k"}
    if policy == "prev_topk":
        used.add("prev_topk_random")
    return used


def unread_index_keys(cfg_dict: dict) -> set[str]:
    """The shared-index keys (`compression.<key>`) a run of this config does not read: they compute nothing
    there, and their defaults have moved since rows were kept, so runs that differ only in them are one setting."""
    s, c = cfg_dict.get("secagg", {}), cfg_dict.get("compression", {})
    masks = "name" not in s or secagg.get(s["name"]).masks
    return set(SHARED_INDEX_KEYS) - shared_index_keys_used(masks, c)


def config_hash(cfg_dict: dict) -> str:
    what = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg_dict.items() if k not in EXECUTION_KEYS}
    s, c = what.get("secagg", {}), what.get("compression", {})
    masks = "name" not in s or secagg.get(s["name"]).masks
    unused = unread_index_keys(what)  # read before neutral values are dropped
    for (group, key), neutral in NEUTRAL.items():
        if key in what.get(group, {}) and what[group][key] == neutral:
            del what[group][key]
    for group, key in WHERE_KEYS:
        what.get(group, {}).pop(key, None)
    if isinstance(what.get("device"), str):  # `cpu:0` is `cpu`; `cuda:1` computes what `cuda:0` does
        what["device"] = what["device"].partition(":")[0]
    if not masks:
        for key in FIELD_KEYS:
            s.pop(key, None)
    for key in unused:
        c.pop(key, None)
    if c.get("options"):
        c["options"] = codec_options_set(c["name"], c["options"])
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def codec_options_set(name: str, options: dict) -> dict:
    """The codec options that differ from the codec's own defaults: a preset that writes a default out
    (`compression=rotation`: bits 8) and a run that leaves it to the codec compute the same. `seed` is kept
    whatever its value: left out, the run's seed stands in for it."""
    if name not in compression.names():
        return dict(options)
    params = inspect.signature(compression.get(name)).parameters
    return {k: v for k, v in options.items() if k == "seed" or k not in params or v != params[k].default}


class RunLog:
    def __init__(self, root: str | Path, chash: str, run_id: str):
        self.dir, self.chash = Path(root) / chash, chash
        self.path = self.dir / "rounds.csv"
        self.done_path = self.dir / "done.json"
        self.run_id = run_id
        self.started_at = time.time()  # the run's start (wall clock), written to done.json with the rounds' span
        self._file = None
        self._lock: int | None = None  # the descriptor of the folder's lock while this run holds it
        self.last_round: int | None = None  # the round of the last row written (an interrupt's handler asks it)

    def finished(self) -> bool:
        return finished(self.dir, self.chash)

    def claim(self) -> None:
        """Hold the folder's lock for this run (released by `release`, or by the OS when the process ends, so a
        killed run never leaves it held); RunInProgress names the holder when another process has it."""
        lock = self.dir / LOCK_NAME
        while True:
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # a refused run removed the empty folder meanwhile
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 512).decode(errors="replace").strip() or "a process that has not said who it is"
                os.close(fd)
                raise RunInProgress(f"{self.dir} is being run by another process ({holder}); running it again would "
                                    "put a second run's rows beside that one's. Wait for it to finish (then this "
                                    "configuration is skipped as finished) or stop it, then rerun") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:  # its last holder removed it between our open and our lock
                same = False
            if same:
                break
            os.close(fd)  # we locked a file its last holder had already removed: take the new one
        _say_holder(fd, f"run {self.run_id}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        self._lock = fd

    def release(self) -> None:
        """Remove the lock file, then let it go (a process that opened it meanwhile sees it removed and retries);
        the folder too if nothing else is in it (a run refused before its first row leaves nothing). A lock file
        that cannot be removed (a folder made read-only) is left unheld, as a killed run's is: raising here would
        hide how the run ended, and keep the folder locked while this process lives."""
        if self._lock is not None:
            try:
                (self.dir / LOCK_NAME).unlink(missing_ok=True)
            except OSError:
                pass
            os.close(self._lock)
            self._lock = None
            try:
                self.dir.rmdir()
            except OSError:  # it holds rows (or another process's lock)
                pass

    def read(self) -> pd.DataFrame:
        return read_rows(self.path)

    def start(self, cfg_dict: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config, text = self.dir / "config.json", json.dumps(cfg_dict, indent=2, sort_keys=True)
        kept = self.run_id
        if self.path.exists():  # a killed run: keep its rows under its own run id
            kept = run_id_of(self.path) or self.run_id
            # its settings outside the hash, kept too: first, so a run killed between the two renames leaves the
            # rows to set aside, not the config to overwrite
            if config.exists() and config.read_bytes() != text.encode():
                config.rename(_untaken(self.dir, f"config.incomplete-{kept}", ".json"))
            self.path.rename(_untaken(self.dir, f"rounds.incomplete-{kept}", ".csv"))
        if (self.dir / MODEL_NAME).exists():  # killed after its last round, before done.json: kept with its rows
            (self.dir / MODEL_NAME).rename(_untaken(self.dir, f"model.incomplete-{kept}", ".npy"))
        if self.done_path.exists():  # a done.json whose rows are gone or do not match it: kept, never trusted
            self.done_path.rename(_untaken(self.dir, f"done.unmatched-{_done_run_id(self.done_path) or self.run_id}",
                                           ".json"))
        write_atomic(config, text)
        self._file = open(self.path, "x", newline="", encoding="utf-8")  # as `finished` and `read_rows` read it
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="raise")
        self._writer.writeheader()
        self._file.flush()

    def write(self, row: dict) -> None:
        with _interrupts_held():  # written and recorded together: an interrupt's handler never writes it twice
            self._writer.writerow({k: row.get(k, "") for k in COLUMNS})
            self.last_round = row.get("round")
        self._file.flush()

    def save_model(self, weights) -> None:
        """The final global weights (float32, as the server holds them) as model.npy: numpy's format, read back
        with `np.load(path, allow_pickle=False)`. Written before done.json, so a finished run that saved its
        model has it whole."""
        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, np.asarray(weights, np.float32), allow_pickle=False)
        write_atomic(self.dir / MODEL_NAME, buffer.getvalue())

    def finish(self, summary: dict) -> None:
        self.close()  # the rows reach the disk (close syncs them) before the file that says they are all there
        write_atomic(self.done_path, json.dumps(summary, indent=2, sort_keys=True))

    def fail(self, error: str) -> None:
        """Record how the run ended beside its rows, even where its rows could not be synced (a full disk, a quota,
        a second Ctrl-C while they were): that is then said in the note."""
        try:
            self.close()
        except BaseException as err:
            error += f"; its rows were then not all synced to {self.path}: {type(err).__name__}: {err}"
        self.dir.mkdir(parents=True, exist_ok=True)  # a run that failed before its first row has no folder yet
        (self.dir / f"failed-{self.run_id}.txt").write_text(error + "\n")

    def close(self) -> None:
        """Flush and sync the rows to the disk, then close (the simulation closes before `finish` writes done.json,
        which must never name rows still in a buffer). Closed even if the sync fails, so it fails once."""
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.flush()
                os.fsync(file.fileno())
            finally:
                file.close()


ID_COLUMNS = {"run_id": str, "config_hash": str, "code": str}  # hex ids: 12 digits would read as an int, 1e5... as inf


def read_rows(path) -> pd.DataFrame:
    """A rounds.csv as a frame, its ids as the strings they are (pandas would read an all-digit id as a number,
    dropping a leading zero, and one like '78e506004120' as inf), its floats the values written: pandas 2 (what
    Python 3.10 gets) parses some floats a unit in the last place off unless asked to round-trip, which pandas 3
    does by default and warns to be asked."""
    import pandas as pd

    exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
    return pd.read_csv(path, dtype=ID_COLUMNS, **exact)


def finished(folder: Path, chash: str | None = None) -> bool:
    """Whether `folder` holds a finished run: a done.json that parses and names the run of rounds.csv and its
    number of rows, beside a config.json that parses (where there is one: every run writes it first). Rows cut
    short (a crash, a full disk), a done.json left beside another run's rows, or a damaged config.json (which a
    report cannot read) are not a finished run: a rerun runs it again, keeping the old rows aside. `chash` (a
    run about to skip its cell): the rows must be that configuration's, not another's in a folder renamed by hand."""
    try:
        done = json.loads((Path(folder) / "done.json").read_text())
        config_path = Path(folder) / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        with open(Path(folder) / "rounds.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, ValueError, csv.Error):  # ValueError: bad JSON or bytes that are not UTF-8
        return False
    return (isinstance(done, dict) and isinstance(config, dict) and bool(rows) and done.get("rounds") == len(rows)
            and all(row.get("run_id") == done.get("run_id") for row in rows)
            and (chash is None or all(row.get("config_hash") == chash for row in rows))
            and all(None not in row.values() and None not in row for row in rows))


def write_atomic(path: Path, text: str | bytes) -> None:
    """`text` (str as UTF-8, or bytes as they are) as the whole of `path`: written beside it, flushed to disk, then
    put in its place (a crash, of the process or of the machine, leaves the old file or the new one, never half)."""
    tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())  # else a power loss may keep the rename and lose the text: an empty done.json
        os.replace(tmp, path)
    except BaseException:  # a full disk, Ctrl-C: no half-written temporary left beside the file
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _interrupts_held():
    """SIGINT and SIGTERM held back (on this thread) until the block ends: they land before or after it whole."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _untaken(folder: Path, stem: str, suffix: str) -> Path:
    """`stem + suffix` in `folder`, or with the first free `.1`, `.2`, ... before the suffix: rows kept aside are
    never replaced (rows whose first id is unreadable are kept under the id of the run that found them, which may
    be killed in turn, its own rows then kept under the same id). The folder's lock keeps other runs out meanwhile."""
    path, n = folder / f"{stem}{suffix}", 0
    while path.exists():
        n += 1
        path = folder / f"{stem}.{n}{suffix}"
    return path


def run_id_of(path: Path) -> str | None:
    """The run id in the first row of a rounds.csv (None if it has no row, or its id is not a plain name, or
    the file is not one)."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            row = next(csv.DictReader(f), None)
    except csv.Error:
        return None
    run_id = (row or {}).get("run_id") or ""
    return run_id if run_id.isalnum() else None


def _done_run_id(path: Path) -> str | None:
    """The run id a done.json names (None if it names none that is a plain name, or is no JSON object)."""
    try:
        run_id = json.loads(path.read_text(encoding="utf-8", errors="replace")).get("run_id")
    except (ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) and run_id.isalnum() else None


def _hold(lock: Path) -> int | None:
    """This run folder's lock, taken (its descriptor; the caller removes the file, then closes it, as
    `RunLog.release` does), or None while another process holds it, or may: a lock file its holder removed between
    our open and our lock (a run may have claimed a new one since, as `RunLog.claim` would)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock).st_ino:
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    _say_holder(fd, "renaming the folder to its current hash")
    return fd


def _say_holder(fd: int, doing: str) -> None:
    """Write into a held lock file who holds it and why: a run refused meanwhile names the holder."""
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, {doing}".encode())


def rehash(root: str | Path) -> list[tuple[str, str]]:
    """Rename each run folder under `root` to the current hash of its config.json, so that a sweep finds (and
    skips) the runs it already finished after the hash's rules moved (a key that computes nothing dropped, a
    new key's neutral value). Rows keep their values; their `config_hash` column is updated, each file replaced
    whole (a crash leaves the old or the new one). A folder whose new name is taken, or whose run is still
    running (its lock held), is left where it is and reported, never merged or overwritten. Returns (old, new)
    renames.
    """
    renamed = []
    for config in sorted(Path(root).glob("*/config.json")):
        old_dir = config.parent
        try:
            new = config_hash(json.loads(config.read_text()))
        except (ValueError, OSError) as err:
            print(f"fedsqueeze: {config} cannot be read ({err}); its folder is left as it is")
            continue
        if new == old_dir.name:
            continue
        new_dir = old_dir.with_name(new)
        if new_dir.exists():
            print(f"fedsqueeze: {old_dir} repeats the run in {new_dir}; left as it is")
            continue
        lock = _hold(old_dir / LOCK_NAME)  # held while rows are rewritten and the folder renamed: a run is refused
        if lock is None:
            print(f"fedsqueeze: {old_dir} is being run; left as it is (rename it once the run has ended)")
            continue
        moved = False
        try:
            for rows in old_dir.glob("rounds*.csv"):  # as bytes: rows kept aside may be damaged, and stay as they are
                write_atomic(rows, rows.read_bytes().replace(f",{old_dir.name},".encode(), f",{new},".encode()))
            old_dir.rename(new_dir)
            moved = True
            renamed.append((old_dir.name, new))
        finally:
            ((new_dir if moved else old_dir) / LOCK_NAME).unlink(missing_ok=True)
            os.close(lock)
    return renamed


if __name__ == "__main__":
    import sys

    folders = sys.argv[1:] or ["results/runs"]
    empty = [f for f in folders if not any(Path(f).glob("*/config.json"))]  # a typo, or a folder of folders of runs
    if empty:
        sys.exit(f"fedsqueeze: no run folder (one holding config.json) directly under {', '.join(empty)}; give the "
                 "folder a sweep writes its runs into (its results.dir), e.g. results/runs")
    for folder in folders:
        moves = rehash(folder)
        print(f"fedsqueeze: {len(moves)} run folders under {folder} renamed to their current config hash")
