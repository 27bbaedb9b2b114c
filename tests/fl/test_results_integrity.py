"""What a rerun or a resumed sweep trusts: the folder a configuration hashes to (committed results included), rows
on disk as they are written, and which folders read as finished; rows and notes kept aside are never replaced."""
import csv
import json
import os
import re
from pathlib import Path

import pytest

import fl
from fl.results import LOCK_NAME, RunLog, config_hash, finished, write_atomic

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_every_committed_run_folder_is_named_by_the_hash_of_its_config():
    """A rule of the hash that moved would leave every committed run unfound: a rerun would compute it again, and
    `python -m fl.results` would rename the committed folders."""
    folders = [p for p in RESULTS.rglob("config.json") if re.fullmatch(r"[0-9a-f]{12}", p.parent.name)]
    assert folders, "no committed run folders found"
    moved = [str(p.parent.relative_to(RESULTS)) for p in folders
             if config_hash(json.loads(p.read_text())) != p.parent.name]
    assert moved == []


def _reordered(value):
    """`value` with the keys of every mapping in it in reverse order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    return value


def test_a_config_whose_keys_come_in_another_order_has_the_same_hash():
    """A config.json written by another tool (or by hand) lists its keys in its own order: still the same run."""
    config = json.loads(next(RESULTS.rglob("config.json")).read_text())
    assert list(_reordered(config)) != list(config)
    assert config_hash(_reordered(config)) == config_hash(config)


def _folder(tmp_path, rows, done):
    folder = tmp_path / "cell"
    folder.mkdir(parents=True)
    (folder / "rounds.csv").write_text("run_id,config_hash,round\n" + "".join(f"{row}\n" for row in rows))
    (folder / "done.json").write_text(json.dumps(done))
    return folder


def test_rows_that_lost_their_last_whole_row_are_not_a_finished_run(tmp_path):
    """Cut at a line's end (a copy stopped there), every row left reads whole: only the count tells."""
    assert not finished(_folder(tmp_path, ["abc,cell,0"], {"run_id": "abc", "rounds": 2}))


def test_rows_that_hold_only_their_header_are_not_a_finished_run_whatever_done_json_counts(tmp_path):
    """No round is no result: a done.json counting none (written by hand, or by a tool) must not make it one."""
    assert not finished(_folder(tmp_path, [], {"run_id": "abc", "rounds": 0}))


def test_a_done_json_that_parses_but_is_not_a_mapping_is_not_a_finished_run(tmp_path):
    """A list or a number there (a damaged or foreign file) is no record of a finished run, and must not raise."""
    assert not finished(_folder(tmp_path, ["abc,cell,0"], ["abc", 1]))


def test_rows_of_another_run_counted_as_done_json_counts_are_not_a_finished_run(tmp_path):
    """A killed rerun's rows as many as the finished run's: its done.json must not vouch for them."""
    assert not finished(_folder(tmp_path, ["new,cell,0", "new,cell,1"], {"run_id": "abc", "rounds": 2}))
    assert not finished(_folder(tmp_path / "mixed", ["abc,cell,0", "new,cell,1"], {"run_id": "abc", "rounds": 2}))


def test_a_row_with_more_fields_than_the_header_is_not_a_finished_run(tmp_path):
    """Two rows run together (a write interleaved with another's) read as one row with fields left over."""
    assert not finished(_folder(tmp_path, ["abc,cell,0", "abc,cell,1,abc,cell"], {"run_id": "abc", "rounds": 2}))


def test_rows_with_a_quote_never_closed_are_not_a_finished_run_and_do_not_raise(tmp_path):
    """A damaged file whose open quote runs past csv's field limit: a resumed sweep must rerun it, not crash."""
    folder = _folder(tmp_path, ["abc,cell,0", 'abc,cell,"' + "x" * (csv.field_size_limit() + 10)],
                     {"run_id": "abc", "rounds": 2})
    assert not finished(folder)


def test_a_row_is_on_disk_as_soon_as_it_is_written(tmp_path):
    """A run killed mid-way (SIGKILL, the OOM killer) keeps every round it logged: nothing waits in a buffer."""
    log = RunLog(tmp_path, "cell", "r1")
    log.start({"seed": 0})
    try:
        log.write({"run_id": "r1", "config_hash": "cell", "round": 0})
        with open(log.path, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [row["round"] for row in rows] == ["0"] and log.last_round == 0
    finally:
        log.close()


def test_finish_syncs_the_rows_before_done_json_says_they_are_all_there(tmp_path, monkeypatch):
    """A power loss after done.json but before the rows reached the disk would leave a done.json vouching for
    rows that are not there (or, counted short, a finished run taken for an unfinished one)."""
    log = RunLog(tmp_path, "cell", "r1")
    log.start({"seed": 0})
    log.write({"run_id": "r1", "config_hash": "cell", "round": 0})
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(f"replace {Path(b).name}"), real_replace(a, b)))
    log.finish({"run_id": "r1", "rounds": 1})
    assert events[0] == "rounds.csv" and events[-1] == "replace done.json"
    assert finished(log.dir)


def test_rows_kept_aside_a_third_time_under_one_id_take_the_next_free_name(tmp_path):
    """A run killed three times with unreadable rows before it: each set of rows kept, none replaced."""
    folder = tmp_path / "cell"
    folder.mkdir()
    for n in range(3):
        (folder / "rounds.csv").write_bytes(b"run_id,config_hash,round\n\xff,cell,%d\n" % n)
        RunLog(tmp_path, "cell", "mine").start({"seed": 0})
    kept = sorted(p.name for p in folder.glob("rounds.incomplete-*"))
    assert kept == ["rounds.incomplete-mine.1.csv", "rounds.incomplete-mine.2.csv", "rounds.incomplete-mine.csv"]
    assert {(folder / name).read_bytes()[-2:] for name in kept} == {b"0\n", b"1\n", b"2\n"}


def test_rows_whose_first_row_csv_cannot_read_are_kept_aside_under_this_runs_id(tmp_path):
    """A quote opened in the first row and never closed runs past csv's field limit: csv.Error, not a crash."""
    folder = tmp_path / "cell"
    folder.mkdir()
    damaged = 'run_id,config_hash,round\n"' + "x" * (csv.field_size_limit() + 10) + "\n"
    (folder / "rounds.csv").write_text(damaged)
    log = RunLog(tmp_path, "cell", "mine")
    log.start({"seed": 0})
    log.close()
    assert (folder / "rounds.incomplete-mine.csv").read_text() == damaged


def test_a_done_json_naming_no_plain_run_id_is_kept_in_its_folder_under_this_runs_id(tmp_path):
    """Its run id names the file it is kept as: a path there would move it out of the run's folder, or fail."""
    for n, done in enumerate(['{"run_id": "../../escaped"}', '{"run_id": "a/b"}', '["not", "a", "mapping"]']):
        folder = tmp_path / str(n) / "cell"
        folder.mkdir(parents=True)
        (folder / "done.json").write_text(done)
        log = RunLog(tmp_path / str(n), "cell", "mine")
        log.start({"seed": 0})
        log.close()
        assert (folder / "done.unmatched-mine.json").read_text() == done
        assert sorted(p.name for p in (tmp_path / str(n)).rglob("*") if p.is_file()) == \
            ["config.json", "done.unmatched-mine.json", "rounds.csv"]


def _stale_folder(tmp_path, damaged=True):
    """A run kept under an older hash; `damaged`: with rows kept aside that are not UTF-8."""
    from fl.config import as_dict, validate

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    folder = tmp_path / "0123456789ab"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "rounds.csv").write_bytes(b"run_id,config_hash,round\nr1,0123456789ab,0\n")
    if damaged:
        (folder / "rounds.incomplete-r0.csv").write_bytes(b"run_id,config_hash,round\nr\xff0,0123456789ab,0\n")
    return config_hash(cfg)


def test_rehash_renames_a_folder_holding_rows_that_are_not_utf8_and_keeps_their_bytes(tmp_path, capsys):
    """Rows kept aside may be damaged (RunLog keeps them whatever their bytes): rehash raised UnicodeDecodeError
    there, leaving that folder and every folder after it under their old names."""
    from fl.results import rehash

    new = _stale_folder(tmp_path)
    assert rehash(tmp_path) == [("0123456789ab", new)]
    assert (tmp_path / new / "rounds.incomplete-r0.csv").read_bytes() == \
        f"run_id,config_hash,round\nr\xff0,{new},0\n".encode("latin-1")
    assert (tmp_path / new / "rounds.csv").read_bytes() == f"run_id,config_hash,round\nr1,{new},0\n".encode()
    capsys.readouterr()
    assert rehash(tmp_path) == [] and capsys.readouterr().out == ""  # a folder named by its hash is left quietly


def test_rehash_syncs_each_rewritten_rows_file_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """Without the fsync, a power loss can keep the rename and lose the text: rows emptied by a rename of folders."""
    from fl.results import rehash

    _stale_folder(tmp_path, damaged=False)
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a))), real_replace(a, b)))
    rehash(tmp_path)
    replaced = [i for i, event in enumerate(events) if event[0] == "replace"]
    assert len(replaced) == 1 and all(events[i - 1] == ("fsync", events[i][1]) for i in replaced)


def test_a_run_the_data_refuses_leaves_no_folder_behind(tmp_path):
    """Refused once its folder was claimed (a split the data cannot give): an empty folder left there would read
    as a run that never finished, to the report and to whoever looks."""
    with pytest.raises(fl.ConfigError, match="2000 clients"):
        fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=none",
                           "fl.rounds=1", "fl.num_clients=2000"]))
    assert list(tmp_path.iterdir()) == []


def test_a_claim_whose_folder_a_refused_run_removed_meanwhile_makes_it_again(tmp_path, monkeypatch):
    """Another run's release removes the folder it left empty, between this claim's mkdir and its open."""
    real_open, removed = os.open, []

    def open_(path, flags, mode=0o777):
        if Path(path).name == LOCK_NAME and not removed:
            removed.append(path)
            Path(path).parent.rmdir()
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", open_)
    log = RunLog(tmp_path, "cell", "mine")
    log.claim()
    try:
        assert removed and (tmp_path / "cell" / LOCK_NAME).exists()
    finally:
        log.release()


def test_a_run_whose_rows_cannot_be_synced_still_leaves_its_failure_note(tmp_path, monkeypatch):
    """A disk quota or an NFS error is often first reported when the rows are synced at the end: the run must fail
    with its failed-<run_id>.txt (the report's reason), not leave rows that read as killed without one."""
    import errno

    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("rounds.csv"):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="quota"):
        fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "secagg=none", "model=mlp_small",
                           "fl.rounds=2", "fl.num_clients=4", "fl.clients_per_round=4"]))
    [note] = tmp_path.glob("*/failed-*.txt")
    assert "OSError" in note.read_text() and "quota" in note.read_text()
    assert len(list(note.parent.glob("rounds.csv"))) == 1 and not (note.parent / "done.json").exists()
    monkeypatch.setattr(os, "fsync", real_fsync)
    log = RunLog(tmp_path, "other", "r1")  # a sync failing as a failed run closes its rows: the note names both
    log.start({"seed": 0})
    monkeypatch.setattr(os, "fsync", fsync)
    log.fail("KeyboardInterrupt: ")
    assert "KeyboardInterrupt: ; its rows were then not all synced to" in (log.dir / "failed-r1.txt").read_text()
    log.close()  # closed once: nothing left to sync


def test_an_interrupt_while_a_row_is_written_lands_after_it_is_recorded_as_written(tmp_path, monkeypatch):
    """The interrupted run's handler writes the row it was holding unless `last_round` says it is written: a
    Ctrl-C between writing the row and recording it wrote it twice."""
    import signal

    log = RunLog(tmp_path, "cell", "r1")
    log.start({"seed": 0})
    real = log._writer.writerow
    monkeypatch.setattr(log._writer, "writerow", lambda row: (real(row), signal.raise_signal(signal.SIGINT)))
    with pytest.raises(KeyboardInterrupt):
        log.write({"run_id": "r1", "config_hash": "cell", "round": 0})
    assert log.last_round == 0
    log.close()


def test_a_run_killed_while_setting_a_killed_runs_rows_aside_leaves_that_runs_config_to_keep(tmp_path, monkeypatch):
    """The config of a killed run, where it differs outside the hash, is put aside before its rows: killed between
    the two, the next run still finds rows to put aside, where the other order left the config to be overwritten."""
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "rounds.csv").write_text("run_id,config_hash,round\nfirst,cell,0\n")
    (folder / "config.json").write_text('{"save_model": true}')
    real = Path.rename

    def killed(self, target):  # killed just after the first rename
        real(self, target)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        RunLog(tmp_path, "cell", "second").start({"save_model": False})
    monkeypatch.setattr(Path, "rename", real)
    log = RunLog(tmp_path, "cell", "third")
    log.start({"save_model": False})
    log.close()
    assert (folder / "config.incomplete-first.json").read_text() == '{"save_model": true}'
    assert (folder / "rounds.incomplete-first.csv").exists()


def test_write_atomic_leaves_no_temporary_behind_when_it_fails(tmp_path, monkeypatch):
    """A full disk or a Ctrl-C mid-write left `<name>.partial-<pid>` beside the file, for good."""
    target = tmp_path / "done.json"
    target.write_text("old")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["done.json"] and target.read_text() == "old"
