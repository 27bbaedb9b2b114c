"""RunLog's folder lock and its rows at their edges: a lock file removed under a claim, a killed holder's note,
rows whose run id is not a plain name, and which folders count as finished."""
import fcntl
import json
import os
from types import SimpleNamespace

import pytest

import fl.results as results
from fl.errors import RunInProgress
from fl.results import LOCK_NAME, RunLog, finished

HOLDER = r"\(pid {pid} on .+, run {run}, since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\)"


def test_a_lock_file_removed_between_open_and_lock_is_not_taken_for_the_folders_lock(tmp_path, monkeypatch):
    """Its last holder released it (removing the file) just as this claim opened it: a lock on that removed file
    locks out nobody, so a second run would start beside this one."""
    removed = []

    def flock(fd, operation):
        if not removed:
            (tmp_path / "cell" / LOCK_NAME).unlink()  # the holder's release, between our open and our lock
            removed.append(fd)
        return fcntl.flock(fd, operation)

    monkeypatch.setattr(results, "fcntl", SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    mine = RunLog(tmp_path, "cell", "mine")
    mine.claim()
    try:
        assert removed and (tmp_path / "cell" / LOCK_NAME).exists()
        with pytest.raises(RunInProgress, match=HOLDER.format(pid=os.getpid(), run="mine")):
            RunLog(tmp_path, "cell", "other").claim()
    finally:
        mine.release()


def test_a_lock_file_that_cannot_be_removed_is_let_go_without_raising_over_the_runs_own_error(tmp_path, monkeypatch):
    """A run folder made read-only (chattr +i) while a run held it: release raised PermissionError over the run's own
    error and kept the lock held for the rest of the process (a sweep's later cells)."""
    mine = RunLog(tmp_path, "cell", "mine")
    mine.claim()
    original = results.Path.unlink

    def read_only(path, missing_ok=False):
        if path.name == LOCK_NAME:
            raise PermissionError(1, "Operation not permitted", str(path))
        return original(path, missing_ok)

    monkeypatch.setattr(results.Path, "unlink", read_only)
    mine.release()
    monkeypatch.setattr(results.Path, "unlink", original)
    assert (tmp_path / "cell" / LOCK_NAME).exists()  # left, unheld: the next run takes it over
    other = RunLog(tmp_path, "cell", "other")
    other.claim()
    other.release()


def test_the_holder_named_to_a_refused_run_is_the_live_one_not_a_killed_runs_note(tmp_path):
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / LOCK_NAME).write_text("pid 1 on elsewhere, run k1lled, since 2020-01-01 00:00:00, a much longer note "
                                    "than any live holder writes")  # left by a run killed while it held the lock
    mine = RunLog(tmp_path, "cell", "mine")
    mine.claim()
    try:
        with pytest.raises(RunInProgress, match=HOLDER.format(pid=os.getpid(), run="mine") + "; running it again"):
            RunLog(tmp_path, "cell", "other").claim()
    finally:
        mine.release()


@pytest.mark.parametrize("run_id", ["../../escaped", "a/b", "x y", ""])
def test_rows_whose_run_id_is_not_a_plain_name_are_kept_in_their_folder_under_this_runs_id(tmp_path, run_id):
    folder = tmp_path / "runs" / "cell"
    folder.mkdir(parents=True)
    (folder / "rounds.csv").write_text(f"run_id,config_hash,round\n{run_id},cell,0\n")
    log = RunLog(tmp_path / "runs", "cell", "mine")
    log.start({"seed": 0})
    log.close()
    assert (folder / "rounds.incomplete-mine.csv").read_text() == f"run_id,config_hash,round\n{run_id},cell,0\n"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["config.json", "rounds.csv",
                                                                          "rounds.incomplete-mine.csv"]


def finished_folder(tmp_path, config=None):
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "rounds.csv").write_text("run_id,config_hash,round\nabc,cell,0\nabc,cell,1\n")
    (folder / "done.json").write_text(json.dumps({"run_id": "abc", "rounds": 2}))
    if config is not None:
        (folder / "config.json").write_text(config)
    return folder


def test_a_finished_run_kept_from_before_config_json_was_written_is_still_finished(tmp_path):
    assert finished(finished_folder(tmp_path))


def test_a_config_json_that_parses_but_is_not_a_mapping_is_not_a_finished_run(tmp_path):
    """A report reads the run's settings from it: a list or a number there is as unreadable as a cut file."""
    folder = finished_folder(tmp_path, "[1, 2]")
    assert not finished(folder)
    (folder / "config.json").write_text('{"seed": 0}')
    assert finished(folder)


def test_rows_kept_aside_under_this_runs_id_are_not_replaced_when_this_run_is_killed_in_turn(tmp_path):
    """Rows whose first run id is unreadable are kept under the id of the run that found them; killed, that run's
    own rows were then moved to the same name, and the rename replaced the damaged run's rows."""
    folder = tmp_path / "cell"
    folder.mkdir()
    damaged = b"run_id,config_hash,round\nab\xffcd,cell,0\nab\xffcd,cell,1\n"
    (folder / "rounds.csv").write_bytes(damaged)
    first = RunLog(tmp_path, "cell", "aaaa")
    first.start({"seed": 0})
    first.write({"run_id": "aaaa", "config_hash": "cell", "round": 0})
    first.close()  # then killed
    (folder / "done.json").write_text("{}")  # a done.json left beside rows that do not match it, twice
    RunLog(tmp_path, "cell", "bbbb").start({"seed": 0})
    (folder / "done.json").write_text("{}")
    RunLog(tmp_path, "cell", "bbbb").start({"seed": 0})
    kept = {p.name: p.read_bytes() for p in folder.glob("rounds.incomplete-*")}
    assert kept["rounds.incomplete-aaaa.csv"] == damaged
    assert kept["rounds.incomplete-aaaa.1.csv"].decode().splitlines()[1].startswith("aaaa,cell,")
    assert len(kept) == 3  # and the second run's header-only rows, under its own id
    assert sorted(p.name for p in folder.glob("done.unmatched-*")) == ["done.unmatched-bbbb.1.json",
                                                                        "done.unmatched-bbbb.json"]


def test_a_file_written_whole_is_on_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """Without an fsync before the rename, a power loss can keep the rename and lose the text (an empty
    done.json or config.json in a finished run's folder); the text must have left Python's buffer by then."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"),
                                                                os.fstat(fd).st_size)), real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a))), real_replace(a, b)))
    target = tmp_path / "done.json"
    target.write_text("old")
    results.write_atomic(target, '{"rounds": 3}')
    tmp = str(tmp_path / f"done.json.partial-{os.getpid()}")
    assert events == [("fsync", tmp, len('{"rounds": 3}')), ("replace", tmp)]
    assert target.read_text() == '{"rounds": 3}' and sorted(p.name for p in tmp_path.iterdir()) == ["done.json"]
