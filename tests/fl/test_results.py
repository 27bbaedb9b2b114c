"""The config hash names an experiment: where it runs and where its rows go are not part of it."""
import json

import numpy as np
import pandas as pd
import pytest

import fl
from fl.config import as_dict, validate
from fl.results import config_hash


def _hash(*overrides):
    return config_hash(as_dict(validate(fl.compose(["secagg=none", *overrides]))))


def test_the_config_hash_ignores_backend_ray_and_results_and_sees_everything_else(tmp_path):
    base = _hash()
    assert base == _hash("backend=inline") == _hash("ray.num_workers=3", "ray.num_cpus_per_worker=0.5") \
        == _hash(f"results.dir={tmp_path}") == _hash("ray.address=auto")
    assert len({base, _hash("seed=1"), _hash("fl.rounds=3"), _hash("compression.ratio=0.1"),
                _hash("dataset.partition=shards"), _hash("model=mlp_small")}) == 6


def test_a_devices_index_leaves_the_hash_alone_but_its_kind_does_not():
    """`device=cpu:0` computes what `cpu` does: a rerun under the other spelling finds the finished run."""
    assert _hash("device=cpu:0") == _hash()
    cuda = {**as_dict(validate(fl.compose(["secagg=none"]))), "device": "cuda"}  # composed without CUDA's check
    assert config_hash(cuda) == config_hash({**cuda, "device": "cuda:1"}) != _hash()


def test_shared_index_keys_leave_the_hash_of_a_run_without_masking_alone_and_name_a_masked_one():
    plain = _hash("compression.ratio=0.1")
    assert plain == _hash("compression.ratio=0.1", "compression.index_policy=sketch") \
        == _hash("compression.ratio=0.1", "compression.fresh_summary=blocks", "compression.block_size=16")
    masked = ["secagg=dh", "compression.ratio=0.1"]
    assert len({_hash(*masked), _hash(*masked, "compression.index_policy=sketch"),
                _hash(*masked, "compression.fresh_summary=blocks"),
                _hash(*masked, "compression.fresh_summary=blocks", "compression.block_size=16")}) == 4
    # the summary before marginals (blocks of 64) keeps the hash it had when it was the default
    as_before = as_dict(validate(fl.compose(["secagg=dh", "compression.ratio=0.1",
                                             "compression.fresh_summary=blocks"])))
    for key in ("fresh_summary", "block_size", "sketch_quant_bits"):
        del as_before["compression"][key]
    assert config_hash(as_before) == _hash(*masked, "compression.fresh_summary=blocks")


def test_a_cohort_run_keeps_the_hash_it_had_before_fl_aggregation_existed_and_a_memory_run_gets_its_own():
    """Rows kept before the key existed must still be found (a rerun skips them): cohort is what they ran."""
    before = as_dict(validate(fl.compose(["secagg=none"])))
    del before["fl"]["aggregation"]
    assert config_hash(before) == _hash() == _hash("fl.aggregation=cohort") != _hash("fl.aggregation=memory")


def test_codec_options_a_codec_does_not_take_or_of_an_unregistered_codec_stay_in_the_hash():
    """Rows kept under a codec since removed (or an option it since dropped) still name their experiment: runs
    that differed in the option keep apart, and hashing them does not fail."""
    def with_options(name, **options):
        cfg = as_dict(validate(fl.compose(["secagg=none"])))
        cfg["compression"].update(name=name, options=options)
        return config_hash(cfg)

    assert with_options("gone", bits=8) != with_options("gone", bits=4)
    assert with_options("topk", retired=1) != with_options("topk", retired=2) != with_options("topk")


def test_a_masked_run_hashes_only_the_keys_its_policy_and_summary_read():
    """Finished cells stay found when a key of another policy or summary moves: a randk run ignores the
    `fresh` summary's keys, marginals ignore the block size, a linear codec ignores the whole index policy."""
    masked = ["secagg=dh", "compression.ratio=0.1"]
    randk = [*masked, "compression.index_policy=randk"]
    assert _hash(*randk) == _hash(*randk, "compression.fresh_summary=blocks", "compression.block_size=16") \
        == _hash(*randk, "compression.sketch_rows=3", "compression.prev_topk_random=0.5")
    assert _hash(*masked) == _hash(*masked, "compression.block_size=16", "compression.sketch_cols_per_k=4")
    assert _hash(*masked) != _hash(*masked, "compression.sketch_quant_bits=8")
    sketch = [*masked, "compression.index_policy=sketch"]
    assert _hash(*sketch) != _hash(*sketch, "compression.sketch_rows=3")
    prev = [*masked, "compression.index_policy=prev_topk"]
    assert _hash(*prev) != _hash(*prev, "compression.prev_topk_random=0.5")
    rotation = ["secagg=dh", "compression=rotation"]
    assert _hash(*rotation) == _hash(*rotation, "compression.index_policy=randk", "compression.fresh_summary=exact")


def test_rehash_renames_a_run_kept_under_an_older_hash_so_a_rerun_finds_it_and_runs_nothing(tmp_path, capsys):
    """A run whose folder was named by an older rule (here: an unmasked run whose hash held the index policy's
    default of the time) is renamed, its rows' config_hash column with it; a repeated one is left alone."""
    import shutil

    import pandas as pd

    from fl.results import rehash

    overrides = [f"results.dir={tmp_path}", "backend=inline", "secagg=none", "model=mlp_small", "fl.rounds=2",
                 "fl.num_clients=4", "fl.clients_per_round=4"]
    rows = fl.run(fl.compose(overrides))
    new = rows["config_hash"].iloc[0]
    shutil.move(tmp_path / new, tmp_path / "0123456789ab")
    stale = tmp_path / "0123456789ab"
    (stale / "rounds.csv").write_text((stale / "rounds.csv").read_text().replace(f",{new},", ",0123456789ab,"))
    shutil.copytree(stale, tmp_path / "ba9876543210")  # the same run kept twice
    assert rehash(tmp_path) == [("0123456789ab", new)]
    assert "ba9876543210 repeats the run" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir() if (p / "config.json").exists()) == sorted([new, "ba9876543210"])
    assert set(pd.read_csv(tmp_path / new / "rounds.csv")["config_hash"]) == {new}
    again = fl.run(fl.compose(overrides))
    assert "holds a finished run" in capsys.readouterr().out
    assert (again["config_hash"] == new).all() and again["accuracy"].tolist() == rows["accuracy"].tolist()


def test_rehash_leaves_a_folder_whose_run_holds_its_lock_and_replaces_rows_whole(tmp_path, capsys):
    """A run still writing into a folder renamed under it would lose its done.json, and a crash while the rows
    were rewritten in place truncated them."""
    import json

    from fl.results import LOCK_NAME, RunLog, rehash

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    new = config_hash(cfg)
    for name, seed in (("0123456789ab", 0), ("ba9876543210", 1)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**cfg, "seed": seed}))
        (folder / "rounds.csv").write_text(f"run_id,config_hash,round\nr{name},{name},0\n")
    running = RunLog(tmp_path, "ba9876543210", "live")
    running.claim()
    try:
        assert (tmp_path / "ba9876543210" / LOCK_NAME).exists()
        assert rehash(tmp_path) == [("0123456789ab", new)]
        assert "ba9876543210 is being run" in capsys.readouterr().out
        assert (tmp_path / "ba9876543210" / "rounds.csv").read_text().endswith(",ba9876543210,0\n")
    finally:
        running.release()
    assert (tmp_path / new / "rounds.csv").read_text() == f"run_id,config_hash,round\nr0123456789ab,{new},0\n"
    assert sorted(p.name for p in (tmp_path / new).iterdir()) == ["config.json", "rounds.csv"]  # no temp left


def test_rehash_holds_a_folders_lock_while_it_rewrites_and_renames_so_a_run_starting_then_is_refused(
        tmp_path, monkeypatch):
    """It checked the lock, then rewrote and renamed: a run of the old hash starting in between wrote its rows
    into a folder renamed under it."""
    from fl import results
    from fl.errors import RunInProgress
    from fl.results import LOCK_NAME, RunLog, rehash

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    new, old = config_hash(cfg), tmp_path / "0123456789ab"
    old.mkdir()
    (old / "config.json").write_text(json.dumps(cfg))
    (old / "rounds.csv").write_text("run_id,config_hash,round\nr0,0123456789ab,0\n")
    refusals, write = [], results.write_atomic

    def rewrite(path, text):  # a run of the old hash starts while the rows are rewritten
        try:
            RunLog(tmp_path, "0123456789ab", "late").claim()
        except RunInProgress as err:
            refusals.append(str(err))
        write(path, text)

    monkeypatch.setattr(results, "write_atomic", rewrite)
    assert rehash(tmp_path) == [("0123456789ab", new)]
    assert len(refusals) == 1 and "renaming the folder to its current hash" in refusals[0]
    assert not old.exists() and not (tmp_path / new / LOCK_NAME).exists()
    assert (tmp_path / new / "rounds.csv").read_text() == f"run_id,config_hash,round\nr0,{new},0\n"


def test_rehash_does_not_take_a_lock_file_its_holder_removed_while_rehash_opened_it(tmp_path, monkeypatch):
    """Run A lets go of the folder between rehash's open and its lock, and run B of the old hash claims the new lock
    file and writes: rehash locked the removed file, rewrote B's rows under it and renamed the folder, so B's later
    rows were lost. Now it leaves the folder, as one whose run holds it."""
    from fl import results
    from fl.results import LOCK_NAME, RunLog, rehash

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    old = "0123456789ab"
    (tmp_path / old).mkdir()
    (tmp_path / old / "config.json").write_text(json.dumps(cfg))
    (tmp_path / old / "rounds.csv").write_text(f"run_id,config_hash,round\nr0,{old},0\n")
    a, b, flock, fired = RunLog(tmp_path, old, "runA"), RunLog(tmp_path, old, "runB"), results.fcntl.flock, []
    a.claim()

    def racing(fd, op):  # rehash's lock, once: A releases and B claims in between its open and its lock
        if not fired:
            fired.append(fd)
            a.release()
            b.claim()
        return flock(fd, op)

    monkeypatch.setattr(results.fcntl, "flock", racing)
    try:
        assert rehash(tmp_path) == []
    finally:
        monkeypatch.setattr(results.fcntl, "flock", flock)
        assert b._lock is not None and (tmp_path / old / LOCK_NAME).exists()
        b.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [old]


@pytest.mark.parametrize("workers", [None, 3])
def test_a_killed_runs_config_is_kept_beside_its_rows_where_the_rerun_differs_outside_the_hash(tmp_path, workers):
    """The rerun replaced config.json: a killed run's ray.num_workers (outside the hash) was lost with it."""
    from fl.results import RunLog

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    killed = RunLog(tmp_path, config_hash(cfg), "killed")
    killed.start(cfg)
    killed.write({"run_id": "killed", "round": 0})
    killed.close()
    before = (killed.dir / "config.json").read_text()
    again = dict(cfg, ray=dict(cfg["ray"], num_workers=workers))
    rerun = RunLog(tmp_path, config_hash(again), "rerun")
    assert rerun.dir == killed.dir
    rerun.start(again)
    rerun.close()
    kept = sorted(p.name for p in killed.dir.iterdir())
    assert json.loads((killed.dir / "config.json").read_text()) == again
    if workers is None:  # the same settings: nothing to keep
        assert kept == ["config.json", "rounds.csv", "rounds.incomplete-killed.csv"]
    else:
        assert kept == ["config.incomplete-killed.json", "config.json", "rounds.csv", "rounds.incomplete-killed.csv"]
        assert (killed.dir / "config.incomplete-killed.json").read_text() == before


def _finished_run(tmp_path):
    from fl.results import finished

    folder = tmp_path / "runs"
    fl.run(fl.compose([f"results.dir={folder}", "backend=inline", "model=mlp_small", "fl.rounds=3", "secagg=none"]))
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    assert finished(run)
    return folder, run


def test_a_done_json_left_beside_other_rows_is_not_a_finished_run_and_is_kept_aside_by_the_rerun(tmp_path):
    """A user deleted rounds.csv only, and the rerun was killed: its partial rows beside the old done.json were
    taken for a finished run (skipped on every rerun, and reported)."""
    import json

    from experiments import report
    from fl.results import finished

    folder, run = _finished_run(tmp_path)
    old = json.loads((run / "done.json").read_text())
    rows = (run / "rounds.csv").read_text().splitlines()
    (run / "rounds.csv").write_text("\n".join(rows[:2]).replace(old["run_id"], "0123456789ab") + "\n")
    assert not finished(run)
    with pytest.raises(SystemExit, match="no finished runs"):  # not reported as a run
        report.load([str(folder)])
    fl.run(fl.compose([f"results.dir={folder}", "backend=inline", "model=mlp_small", "fl.rounds=3", "secagg=none"]))
    assert finished(run) and json.loads((run / "done.json").read_text())["run_id"] != old["run_id"]
    (kept,) = run.glob("done.unmatched-*.json")
    assert json.loads(kept.read_text()) == old
    assert kept.name == f"done.unmatched-{old['run_id']}.json"  # named for the run it names, as its rows would be
    assert len(list(run.glob("rounds.incomplete-0123456789ab.csv"))) == 1


def test_rows_cut_short_or_unreadable_are_not_a_finished_run(tmp_path):
    from fl.results import run_id_of, finished

    _, run = _finished_run(tmp_path)
    whole = (run / "rounds.csv").read_bytes()
    (run / "rounds.csv").write_bytes(whole[:whole.rindex(b"\n", 0, len(whole) - 1) + 60])  # the last row cut
    assert not finished(run)
    (run / "rounds.csv").write_bytes(bytes(range(256)) * 10)  # not a CSV at all
    assert not finished(run) and run_id_of(run / "rounds.csv") is None
    (run / "rounds.csv").write_bytes(whole)
    (run / "done.json").write_text('{"run_id": ')  # a done.json cut short
    assert not finished(run)
    rows = whole.decode().splitlines()
    (run / "rounds.csv").write_text("\n".join(rows + rows[-1:]) + "\n")  # one row more than done.json counts
    (run / "done.json").write_text(json.dumps({"run_id": rows[1].split(",")[0], "rounds": len(rows) - 1}))
    assert not finished(run)
    (run / "rounds.csv").write_bytes(whole)
    assert finished(run)


def test_a_damaged_config_json_is_not_a_finished_run_and_the_rerun_runs_it_again(tmp_path):
    """A finished run whose config.json was cut short: the report refused the folder, and the rerun skipped it as
    finished, so nothing but moving the folder by hand got past it. Now it is an unfinished run to both."""
    from experiments import report
    from fl.results import finished

    folder, run = _finished_run(tmp_path)
    config = (run / "config.json").read_text()
    (run / "config.json").write_text(config[:40])
    assert not finished(run)
    with pytest.raises(SystemExit, match="no finished runs") as refused:  # listed as unfinished, not reported
        report.load([str(folder)])
    assert str(refused.value).endswith(f"1 unfinished (crashed, killed, cut short or still running; rerun their "
                                       f"command to resume):\n  {run}")
    rows = fl.run(fl.compose([f"results.dir={folder}", "backend=inline", "model=mlp_small", "fl.rounds=3",
                              "secagg=none"]))
    assert finished(run) and (run / "config.json").read_text() == config and len(rows) == 3
    assert len(list(run.glob("rounds.incomplete-*.csv"))) == 1  # the earlier rows, kept aside


def test_a_partitions_parameter_under_another_partition_and_digits_test_fraction_elsewhere_do_not_name_a_run():
    """`dataset.partition=iid,dirichlet dataset.alpha=0.1,0.5` ran the same IID experiment twice."""
    assert _hash("dataset.alpha=0.1") == _hash() != _hash("dataset.partition=dirichlet", "dataset.alpha=0.1")
    assert _hash("dataset.partition=dirichlet", "dataset.shards_per_client=3", "dataset.labels_per_client=4") == \
        _hash("dataset.partition=dirichlet")
    assert _hash("dataset.partition=shards", "dataset.shards_per_client=3") != _hash("dataset.partition=shards")
    assert _hash("dataset.test_fraction=0.3") != _hash()  # digits reads it
    fmnist = ("dataset=fashion_mnist", "model=lenet")
    assert _hash(*fmnist, "dataset.test_fraction=0.3") == _hash(*fmnist)


def test_a_config_json_that_does_not_parse_is_named_by_rehash_and_report_and_nothing_is_lost(tmp_path, capsys):
    """Both died on the first bad file with a bare JSONDecodeError, and rehash left the folders after it alone."""
    import json

    from experiments import report
    from fl.results import rehash

    cfg = as_dict(validate(fl.compose(["secagg=none", "model=mlp_small"])))
    for name, text in (("0000000000aa", '{"seed": '), ("ffffffffffff", json.dumps(cfg))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
        (tmp_path / name / "rounds.csv").write_text(f"run_id,config_hash,round\nr{name},{name},0\n")
    assert rehash(tmp_path) == [("ffffffffffff", config_hash(cfg))]  # the folder after the bad one too
    assert "0000000000aa/config.json cannot be read" in capsys.readouterr().out
    assert (tmp_path / "0000000000aa" / "config.json").read_text() == '{"seed": '
    with pytest.raises(SystemExit, match="0000000000aa/config.json cannot be read"):
        report.config_settings(tmp_path / "0000000000aa" / "config.json")


def test_ids_that_look_like_numbers_read_back_as_the_strings_they_are(tmp_path):
    """pandas read '78e506004120' as inf and '000123456789' as 123456789: fl.run returned such a config hash as a
    float (the folder name lost), and the report took two runs whose ids both read as inf for one run copied twice."""
    from experiments import report
    from fl.results import read_rows

    for name, run_id, chash in (("a", "1e5000000001", "78e506004120"), ("b", "2e5000000002", "000123456789")):
        run = tmp_path / name / chash
        run.mkdir(parents=True)
        rows = pd.DataFrame([{"run_id": run_id, "config_hash": chash, "code": "0123456789ab", "seed": 0,
                              "dataset": "digits", "partition": "iid", "model": "mlp_small", "n_params": 10,
                              "compression": "none", "ratio": 1.0, "error_feedback": False, "secagg": "none",
                              "index_policy": "dense", "round": 0, "accuracy": 0.5, "num_clients": 10,
                              "bytes_up": 10, "bytes_up_per_client": 1, "bytes_down_per_client": 1, "t_round": 1.0}])
        rows.to_csv(run / "rounds.csv", index=False)
        (run / "done.json").write_text(json.dumps({"run_id": run_id, "rounds": 1}))
        back = read_rows(run / "rounds.csv")
        assert (back["run_id"].iloc[0], back["config_hash"].iloc[0], back["code"].iloc[0]) == (run_id, chash,
                                                                                             "0123456789ab")
    loaded, _ = report.load([str(tmp_path / "a"), str(tmp_path / "b")])
    assert sorted(loaded["run_id"]) == ["1e5000000001", "2e5000000002"]  # two runs, not one 'inf' counted once


def test_rows_read_back_the_floats_a_run_wrote_to_the_last_bit(tmp_path):
    """update_norm_max, losses and seconds are full-precision floats: pandas 2's default parser read some back a unit
    in the last place off, so a run's returned rows differed from the values it measured
    (reproduce and the tests compare rows exactly). Fails on pandas 2 without the round-trip read."""
    from fl.results import COLUMNS, RunLog, read_rows

    values = np.random.default_rng(0).random(2000) * 3
    log = RunLog(tmp_path, "0123456789ab", "floats")
    log.claim()
    log.start({"seed": 0})
    for i, v in enumerate(values):
        log.write({"run_id": "floats", "round": i, "loss": float(v), "update_norm_max": float(v) * 1e-3})
    log.close()
    log.release()
    back = read_rows(log.path)
    assert list(back.columns) == list(COLUMNS)
    assert back["loss"].tolist() == values.tolist()
    assert back["update_norm_max"].tolist() == (values * 1e-3).tolist()


def test_a_masked_run_is_named_by_its_field_widths_a_plain_one_is_not():
    """Two masked cells that differ only in their field must never share a folder (a rerun would skip one)."""
    masked = ["secagg=dh", "compression.ratio=0.1"]
    assert len({_hash(*masked), _hash(*masked, "secagg.quant_bits=8"), _hash(*masked, "secagg.bits=24")}) == 3
    plain = as_dict(validate(fl.compose(["secagg=none", "compression.ratio=0.1"])))
    older = json.loads(json.dumps(plain))
    older["secagg"]["quant_bits"] = 8  # rows recorded before a plain run's secagg keys were normalized
    assert config_hash(older) == config_hash(plain)


def test_a_finished_run_renamed_by_hand_to_another_configurations_folder_is_run_again_not_skipped(tmp_path):
    """A folder named for seed 1 holding seed 0's finished run: the seed-1 cell was skipped, and its rows returned
    (and reported) as seed 1's. The rows name their configuration; the run keeps them aside and runs its own."""
    from fl.config import as_dict, validate
    from fl.results import config_hash, finished, read_rows

    folder, run = _finished_run(tmp_path)
    other = ["results.dir=" + str(folder), "backend=inline", "model=mlp_small", "fl.rounds=3", "secagg=none", "seed=1"]
    target = folder / config_hash(as_dict(validate(fl.compose(other))))
    old_rows = read_rows(run / "rounds.csv")
    run.rename(target)
    assert finished(target) and not finished(target, target.name)  # the report's reading, and a cell's
    rows = fl.run(fl.compose(other))
    assert set(rows["config_hash"]) == {target.name} and set(rows["seed"]) == {1}
    assert finished(target, target.name)
    (kept,) = target.glob("rounds.incomplete-*.csv")
    assert read_rows(kept).equals(old_rows)


def test_rehash_from_the_command_line_refuses_a_folder_without_runs_directly_under_it(tmp_path):
    """A typo, or the parent of a results dir, renamed nothing and said so with exit status 0, which reads as
    "every run already has its current hash"."""
    import subprocess
    import sys

    (tmp_path / "runs" / "abc").mkdir(parents=True)
    (tmp_path / "runs" / "abc" / "config.json").write_text("{}")
    for folder in (tmp_path / "missing", tmp_path):
        done = subprocess.run([sys.executable, "-m", "fl.results", str(folder)], capture_output=True, text=True)
        assert done.returncode == 1 and f"no run folder (one holding config.json) directly under {folder};" \
            in done.stderr
