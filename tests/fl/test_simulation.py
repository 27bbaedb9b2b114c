"""End to end on the bundled digits data: accuracy, bytes, backends, reruns, crashes and bad updates."""
import json

import numpy as np
import pandas as pd
import pytest

import fl
import fl.simulation as sim
from fl import wire
from fl.results import COLUMNS, read_rows
from fl.rounds import masked
from fl.runtime.worker import Worker


def run(tmp_path, *overrides, backend="inline"):
    return fl.run(fl.compose([f"results.dir={tmp_path}", f"backend={backend}", *overrides]))


def small(tmp_path, *overrides, **kw):
    return run(tmp_path, "model=mlp_small", "fl.rounds=3", *overrides, **kw)


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def default_ray(results_dir, ray_session):
    return run(results_dir / "ray", backend="ray")


@pytest.fixture(scope="module")
def dense(results_dir):
    return run(results_dir, "secagg=none", "compression=none")


def test_default_run_reaches_093_on_digits_with_one_row_per_round(default_ray):
    """`python simulate.py`: DH masking + top-k 0.5 on both sides, Ray workers, 20 rounds."""
    rows = default_ray
    assert len(rows) == 20 and list(rows["round"]) == list(range(20))
    assert set(COLUMNS) <= set(rows.columns)
    assert rows["accuracy"].iloc[-1] >= 0.93
    # a model that looks at its input: logits that vary across images, no class given to most of them
    assert (rows["logit_std"] > 0.1).all() and rows["logit_std"].iloc[-1] > 1.0
    assert rows["top_class_share"].iloc[-1] < 0.2
    assert (rows[["secagg", "compression", "ratio"]].iloc[0].tolist()) == ["dh", "topk", 0.5]
    assert (rows["bytes_up"] > 0).all() and (rows["bytes_up_protocol"] > 0).all()


def test_inline_and_ray_backends_give_the_same_results(default_ray, results_dir):
    inline = run(results_dir / "inline")
    np.testing.assert_array_equal(inline["accuracy"], default_ray["accuracy"])
    np.testing.assert_array_equal(inline["loss"], default_ray["loss"])
    np.testing.assert_array_equal(inline["bytes_up"], default_ray["bytes_up"])
    np.testing.assert_array_equal(inline["bytes_down"], default_ray["bytes_down"])


def test_masked_topk_at_ratio_01_stays_within_2_points_of_dense_at_035x_the_upload(dense, results_dir):
    masked = run(results_dir, "secagg=dh", "compression=topk", "compression.ratio=0.1", "compression.client=true")
    assert masked["index_policy"].iloc[0] == "fresh(marginals)"
    assert masked["accuracy"].iloc[-1] >= dense["accuracy"].iloc[-1] - 0.02
    assert masked["bytes_up"].sum() <= 0.35 * dense["bytes_up"].sum()
    assert (masked["bytes_up_sketch"] > 0).all()


def test_unmasked_topk_at_ratio_01_stays_within_2_points_of_dense_at_015x_the_upload(dense, results_dir):
    topk = run(results_dir, "secagg=none", "compression=topk", "compression.ratio=0.1", "compression.client=true")
    assert topk["index_policy"].iloc[0] == "per-client"
    assert topk["accuracy"].iloc[-1] >= dense["accuracy"].iloc[-1] - 0.02
    assert topk["bytes_up"].sum() <= 0.15 * dense["bytes_up"].sum()


@pytest.fixture
def recorded(monkeypatch):
    """Lengths of every message the inline run serializes, by kind."""
    sizes = {}
    for name in ("encode_update", "encode_advertise", "encode_masked", "encode_roster", "encode_broadcast",
                 "encode_share_keys", "encode_share_bundle", "encode_unmask_request", "encode_unmask_response",
                 "encode_round_index"):
        original = getattr(wire, name)

        def wrapper(*a, _original=original, _name=name, **kw):
            message = _original(*a, **kw)
            sizes.setdefault(_name, []).append(len(message))
            return message

        monkeypatch.setattr(wire, name, wrapper)
    return sizes


@pytest.mark.parametrize("policy", ["fresh", "sketch"])
def test_bytes_are_the_lengths_of_the_serialized_messages_with_masking(tmp_path, recorded, policy):
    """Every message of both masked exchanges (fresh) or of the one (sketch) is counted at its len(), each
    message to every client that receives it; the masked values travel at b bits per element."""
    rows = small(tmp_path, "fl.num_clients=6", "fl.clients_per_round=6", "compression.ratio=0.1",
                 f"compression.index_policy={policy}")
    protocol_up = sum(sum(recorded[k]) for k in ("encode_advertise", "encode_share_keys", "encode_unmask_response"))
    assert rows["bytes_up_protocol"].sum() == protocol_up
    assert rows["bytes_up"].sum() == protocol_up + sum(recorded["encode_masked"])
    assert rows["bytes_down"].sum() == 6 * (sum(recorded["encode_broadcast"]) + sum(recorded["encode_roster"])
                                            + sum(recorded["encode_unmask_request"])
                                            + sum(recorded.get("encode_round_index", []))) \
        + sum(recorded["encode_share_bundle"])
    exchanges = 2 if policy == "fresh" else 1
    assert len(recorded["encode_masked"]) == len(recorded["encode_advertise"]) == 6 * exchanges * len(rows)
    assert len(recorded.get("encode_round_index", [])) == (len(rows) if policy == "fresh" else 0)
    n, b, k = rows["n_params"].iloc[0], rows["field_bits"].iloc[0], 481
    assert n == 4810  # mlp_small on digits: k = ceil(0.1 n)
    elements = k + 1 + (0 if policy == "fresh" else 2 * k)  # values, weight (one digit), the residual sketch
    assert b == 16 + 3  # 6 clients of 16-bit values
    assert 0 < max(recorded["encode_masked"]) - wire.masked_bytes(elements, b) <= wire._FRAME_BYTES


@pytest.mark.parametrize("codec", [("compression=none",), ("compression.client=false",)])
def test_masking_every_entry_uploads_the_values_and_the_weight_and_no_summary(tmp_path, recorded, codec):
    """Index policy `all` (no client compression): every position is sent, so no `fresh` summary or sketch
    rides with the values; the reset default policy (`fresh` with marginals) used to add its table to every upload."""
    rows = small(tmp_path, "fl.num_clients=6", "fl.clients_per_round=6", "fl.rounds=2", *codec)
    assert rows["index_policy"].iloc[0] == "all" and (rows["bytes_up_sketch"] == 0).all()
    n, b = rows["n_params"].iloc[0], rows["field_bits"].iloc[0]
    assert len(recorded["encode_masked"]) == 6 * len(rows)
    assert 0 < max(recorded["encode_masked"]) - wire.masked_bytes(n + 1, b) <= wire._FRAME_BYTES  # values, weight


def test_bytes_are_the_lengths_of_the_serialized_messages_without_masking(tmp_path, recorded):
    rows = small(tmp_path, "secagg=none", "fl.num_clients=6", "fl.clients_per_round=6", "compression.ratio=0.1")
    assert rows["bytes_up"].sum() == sum(recorded["encode_update"])
    assert rows["bytes_down"].sum() == 6 * sum(recorded["encode_broadcast"])
    n = rows["n_params"].iloc[0]
    assert rows["bytes_up_per_client"].iloc[0] < 4 * n * 0.15  # top-k 0.1: values + positions + header


@pytest.mark.parametrize("secagg", [("secagg=none",),
                                    # masked, with clients dropping at every step: which secrets are recovered
                                    # and which messages are sent depend on the SecAgg+ graph of each round
                                    ("secagg=secaggplus", "fl.num_clients=12", "fl.clients_per_round=12",
                                     "secagg.dropout=0.1")])
def test_one_or_two_workers_and_two_runs_give_identical_results(tmp_path, secagg):
    one = small(tmp_path / "a", "ray.num_workers=1", "dataset.partition=dirichlet", *secagg)
    two = small(tmp_path / "b", "ray.num_workers=2", "dataset.partition=dirichlet", *secagg)
    again = small(tmp_path / "c", "ray.num_workers=2", "dataset.partition=dirichlet", *secagg)
    for other in (two, again):
        for column in ("accuracy", "loss", "bytes_up", "bytes_down", "dropped", "aborted"):
            np.testing.assert_array_equal(one[column], other[column])
    if "secagg.dropout=0.1" in secagg:
        assert one["dropped"].sum() > 0 and not one["aborted"].all()


@pytest.mark.parametrize("backend", ["inline", "ray"])
@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_streamed_replies_in_small_chunks_give_the_same_results_as_one_reply(tmp_path, monkeypatch, backend, secagg,
                                                                            request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    import fl.rounds.exchange
    from fl.runtime.pool import InlinePool, RayPool

    streamed = []
    for cls in (InlinePool, RayPool):
        original = cls.stream
        monkeypatch.setattr(cls, "stream", lambda self, step, args, chunk, _o=original, **kw:
                            streamed.append(step.__name__) or _o(self, step, args, chunk, **kw))
    # with dh, 10% of the clients drop at each step: lost messages in the middle of a stream
    settings = (f"secagg={secagg}", "secagg.dropout=0.1") if secagg == "dh" else ("secagg=none",)
    whole = small(tmp_path / "whole", *settings, backend=backend)
    assert streamed == []  # mlp_small's messages fit one chunk
    # about two messages per chunk: mlp_small's dense updates are 19 KB, its masked top-k values 5.7 KB (2,406
    # elements of 19 bits); the block energies (76 cells) fit one
    monkeypatch.setattr(fl.rounds.exchange, "CHUNK_BYTES", 30_000 if secagg == "none" else 10_000)
    chunked = small(tmp_path / "chunked", *settings, backend=backend)
    assert streamed == 3 * ["masked_values" if secagg == "dh" else "client_round"]  # one a round
    for column in ("accuracy", "loss", "bytes_up", "bytes_down", "rejected", "dropped"):
        np.testing.assert_array_equal(whole[column], chunked[column])
    if secagg == "dh":
        assert whole["dropped"].sum() > 0 and not whole["aborted"].all()


def test_rerunning_a_finished_configuration_skips_it_and_keeps_its_rows(tmp_path, capsys):
    first = small(tmp_path)
    path = next(tmp_path.glob("*/rounds.csv"))
    stamp = path.stat().st_mtime_ns
    second = small(tmp_path)
    assert "skipping" in capsys.readouterr().out
    assert path.stat().st_mtime_ns == stamp
    pd.testing.assert_frame_equal(first, second)  # the same rows, every column, whether run or read back
    assert list(first.columns) == COLUMNS
    plain = small(tmp_path / "plain", "secagg=none")  # a plain run's rows hold masking's columns, empty
    assert list(plain.columns) == COLUMNS and plain["t_mask"].isna().all()


def test_an_interrupt_just_after_the_carried_row_is_written_does_not_write_it_again(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM landing after round 1's row (evaluated inside round 2) reached the file but before the run
    let go of it: the handler wrote the row a second time (rounds 0, 1, 1 in a CI run of the SIGTERM test)."""
    original = sim.log_round

    def interrupted_after_round_1(log, rows, row, *args):
        original(log, rows, row, *args)
        if row["round"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(sim, "log_round", interrupted_after_round_1)
    with pytest.raises(KeyboardInterrupt):
        small(tmp_path, "fl.eval_overlap=true")
    (kept,) = tmp_path.glob("*/rounds.csv")
    rows = read_rows(kept)
    assert list(rows["round"]) == [0, 1] and rows["accuracy"].notna().all()


@pytest.mark.parametrize("overlap", ["true", "false"])
def test_a_crashed_run_keeps_its_rows_and_a_rerun_does_not_overwrite_them(tmp_path, monkeypatch, overlap):
    """Killed in round 2: rounds 0 and 1 are on disk. With the evaluation carried, round 1's row was waiting for
    round 2 to bring its evaluation: it is written without it."""
    original = sim.Server.broadcast

    def crash_in_round_2(self, r, *a, **kw):
        if r == 2:
            raise RuntimeError("killed")
        return original(self, r, *a, **kw)

    monkeypatch.setattr(sim.Server, "broadcast", crash_in_round_2)
    with pytest.raises(RuntimeError, match="killed"):
        small(tmp_path, f"fl.eval_overlap={overlap}")
    folder = next(tmp_path.iterdir())
    kept = pd.read_csv(folder / "rounds.csv")
    assert list(kept["round"]) == [0, 1] and not (folder / "done.json").exists()
    assert kept["accuracy"].notna().tolist() == [True, overlap == "false"]
    monkeypatch.setattr(sim.Server, "broadcast", original)
    rows = small(tmp_path, f"fl.eval_overlap={overlap}")
    assert len(rows) == 3 and (folder / "done.json").exists() and rows["accuracy"].notna().all()
    kept = list(folder.glob("rounds.incomplete-*.csv"))
    killed = read_rows(kept[0])  # its run id read as the string it is
    assert len(kept) == 1 and len(killed) == 2
    # named for the run whose rows they are, as its failed-<run_id>.txt is; the rerun is another run
    assert kept[0].name == f"rounds.incomplete-{killed['run_id'].iloc[0]}.csv" \
        != f"rounds.incomplete-{rows['run_id'].iloc[0]}.csv"
    assert (folder / f"failed-{killed['run_id'].iloc[0]}.txt").exists()


def test_a_configuration_another_process_is_running_into_the_folder_is_refused_and_its_rows_are_left_alone(tmp_path):
    """Two sweeps that share a cell and a results folder: the second must neither move the first one's rows aside
    nor start its own beside the first one's done.json, or a killed second run reads as the finished one."""
    import os
    import signal
    import subprocess
    import sys

    from fl.config import as_dict, validate
    from fl.errors import RunInProgress
    from fl.results import LOCK_NAME, RunLog, config_hash

    overrides = [f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=3"]
    chash = config_hash(as_dict(validate(fl.compose(overrides))))
    folder = tmp_path / chash
    folder.mkdir()
    (folder / "rounds.csv").write_text("its rows so far\n")
    # another process that holds the folder's lock, as a running run does, until it is killed
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from fl.results import RunLog; log = RunLog(sys.argv[1], sys.argv[2], 'theirs'); "
        "log.claim(); print('held', flush=True); time.sleep(600)"), str(tmp_path), chash],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        holding = rf"{chash} is being run by another process \(pid {holder.pid} on .*, run theirs, since "
        with pytest.raises(RunInProgress, match=holding):
            fl.run(fl.compose(overrides))
        assert sorted(p.name for p in folder.iterdir()) == ["rounds.csv", LOCK_NAME]
        assert (folder / "rounds.csv").read_text() == "its rows so far\n"
        mine = RunLog(tmp_path, chash, "mine")
        with pytest.raises(RunInProgress):
            mine.claim()
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # killed: the OS lets its lock go, its file stays
        holder.wait()
    assert (folder / LOCK_NAME).exists()
    rows = fl.run(fl.compose(overrides))  # the killed run's rows are kept aside, as for any killed run
    (kept,) = folder.glob("rounds.incomplete-*.csv")
    assert len(rows) == 3 and kept.read_text() == "its rows so far\n"
    assert (folder / "done.json").exists() and not (folder / LOCK_NAME).exists()
    skipped = fl.run(fl.compose(overrides))  # finished: read back, not run, and no lock left
    assert skipped["run_id"].tolist() == rows["run_id"].tolist() and not (folder / LOCK_NAME).exists()


def test_an_experiment_grid_waits_for_a_cell_another_process_is_running_and_then_runs_it(tmp_path, capsys):
    """Two experiment scripts that share a cell (a dense baseline in results/runs) side by side: the second waits."""
    import threading

    from experiments.grid import run_when_free
    from fl.config import as_dict, validate
    from fl.results import RunLog, config_hash

    cfg = fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=2", "secagg=none"])
    theirs = RunLog(tmp_path, config_hash(as_dict(validate(cfg))), "theirs")
    theirs.claim()
    threading.Timer(1.0, theirs.release).start()  # they stop (here: without rows) a second later
    rows = run_when_free(cfg, poll_s=0.2)
    assert len(rows) == 2 and "is being run by another process (pid" in capsys.readouterr().out


def test_a_run_that_fails_before_its_first_round_is_recorded_and_a_rerun_runs_it(tmp_path, monkeypatch):
    """A worker that cannot start (say, its shared-memory buffer) fails the run before any row: the failure is
    recorded where the rows would be, the report lists it, and rerunning the command runs it."""
    import fl.simulation as sim
    from experiments import report

    original = sim.Plan.build
    monkeypatch.setattr(sim.Plan, "build", lambda *a, **kw: (_ for _ in ()).throw(FileExistsError("/dev/shm/x")))
    with pytest.raises(FileExistsError):
        small(tmp_path)
    (failed,) = tmp_path.glob("*/failed-*.txt")
    assert failed.read_text() == "FileExistsError before the first round: /dev/shm/x\n"
    assert not (failed.parent / "rounds.csv").exists()
    monkeypatch.setattr(sim.Plan, "build", original)
    other = tmp_path / "other"
    small(other)  # a report over a finished run and the failed one
    rows, incomplete = report.load([str(tmp_path)])
    assert incomplete == [failed.parent / "rounds.csv"] and rows["run_id"].nunique() == 1
    rows = small(tmp_path)
    assert len(rows) == 3 and (failed.parent / "done.json").exists() and failed.exists()


def test_the_report_gives_an_unfinished_runs_own_error(tmp_path):
    """It gave the error of the failed-<run_id>.txt last by name, an arbitrary attempt's (ids are random); now the
    note of the run whose rows these are."""
    import os
    import shutil

    from experiments import report
    from fl.results import run_id_of

    small(tmp_path / "runs")
    (done,) = (tmp_path / "runs").glob("*/done.json")
    cut = tmp_path / "runs" / "0123456789ab"  # rows that never finished, after two failed attempts
    cut.mkdir()
    shutil.copy(done.parent / "config.json", cut)
    (cut / "rounds.csv").write_text("".join((done.parent / "rounds.csv").open().readlines()[:2]))
    (cut / "failed-zzzz.txt").write_text("MemoryError in round 1\n")
    (cut / f"failed-{run_id_of(cut / 'rounds.csv')}.txt").write_text("KeyboardInterrupt in round 0\n")
    os.utime(cut / "failed-zzzz.txt", (1e9, 1e9))  # the earlier attempt
    report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "table")])
    (line,) = [x for x in (tmp_path / "table" / "topk_table.md").read_text().splitlines() if "0123456789ab" in x]
    assert line.endswith(": KeyboardInterrupt in round 0")


@pytest.mark.parametrize("blocked", ["partitions.csv", "done.json.partial-{pid}"])
def test_a_run_that_raises_writing_its_files_is_recorded_and_never_marked_finished(tmp_path, blocked):
    """A file the run cannot write (here: a folder in its place; a full disk, a file system gone read-only) before
    its first round or after its last: the error is recorded in failed-<run_id>.txt, as a crash in a round is (it
    left nothing but the rows, which read as a kill), and the rows are not marked finished."""
    import os

    from fl.config import as_dict, validate
    from fl.results import config_hash

    cfg = fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=3"])
    folder = tmp_path / config_hash(as_dict(validate(cfg)))
    (folder / blocked.format(pid=os.getpid())).mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        fl.run(cfg)
    (failed,) = folder.glob("failed-*.txt")
    assert failed.read_text().startswith("IsADirectoryError") and not (folder / "done.json").exists()
    rows = read_rows(folder / "rounds.csv")
    if blocked == "partitions.csv":
        assert rows.empty
    else:  # every round's row, named for the run whose failure is recorded
        assert list(rows["round"]) == [0, 1, 2] and failed.name == f"failed-{rows['run_id'].iloc[0]}.txt"


def test_data_that_is_not_found_is_refused_and_leaves_no_folder(tmp_path):
    with pytest.raises(fl.ConfigError, match="apt-get install dataset-fashion-mnist"):
        run(tmp_path / "runs", "dataset=fashion_mnist", f"dataset.root={tmp_path / 'none'}", "dataset.system_dirs=[]",
            "fl.rounds=1")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("split,match", [
    (["fl.num_clients=2000"], "fl.num_clients=2000: 2000 clients cannot each get 1 of 1437 training samples"),
    (["fl.num_clients=800", "dataset.partition=shards"],
     "cannot cut 1437 training samples into fl.num_clients x dataset.shards_per_client = 800 x 2 shards"),
])
def test_a_split_the_data_cannot_give_is_refused_before_any_work_and_leaves_no_folder(tmp_path, split, match):
    """The training set is known only once loaded: the driver splits it before any worker does, so a split it cannot
    give is refused in one line (it was a traceback from every worker, and a failed-*.txt)."""
    from fl.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        run(tmp_path / "runs", *split, "fl.clients_per_round=10", "model=mlp_small", "fl.rounds=1")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def _poison(monkeypatch, client=2):
    original = Worker.train

    def train(self, cid, round):
        update, n = original(self, cid, round)
        if cid == client:
            update[5] = np.nan
        return update, n

    monkeypatch.setattr(Worker, "train", train)


def test_a_nan_update_is_rejected_never_aggregated(tmp_path, monkeypatch):
    _poison(monkeypatch)
    rows = small(tmp_path, "secagg=none", "fl.num_clients=5", "fl.clients_per_round=5")
    assert (rows["rejected"] == 1).all()
    assert rows["accuracy"].iloc[-1] > 0.5  # the other four clients still train a finite model


def test_a_nan_update_under_masking_is_never_sent_and_the_round_goes_on_without_it(tmp_path, monkeypatch):
    _poison(monkeypatch)
    rows = small(tmp_path, "fl.num_clients=5", "fl.clients_per_round=5")
    assert (rows["rejected"] == 1).all() and (rows["dropped"] == 0).all() and not rows["aborted"].any()
    assert rows["accuracy"].iloc[-1] > 0.5


@pytest.mark.parametrize("policy,dropout", [("sketch", 0.1), ("fresh", 0.06)])
def test_dh_with_dropouts_at_every_step_stays_within_2_points_of_no_masking(results_dir, policy, dropout):
    """About 27% of the cohort vanishes over a round at 10% at each of the one-exchange round's three steps
    (1 - 0.9^3), and at 6% at each of `fresh`'s five (1 - 0.94^5). 10 clients, t = 6: a round aborts when 5 of
    10 vanish (P = 0.12 and 0.11: about 2.3 of 20 rounds); under `fresh`'s default summary (energies) a client
    gone between its two exchanges does not abort the round."""
    plain = run(results_dir, "secagg=none")
    dropped = run(results_dir, "secagg=dh", f"secagg.dropout={dropout}", f"compression.index_policy={policy}")
    assert dropped["dropped"].sum() > 0 and dropped["aborted"].sum() <= 5
    if policy == "fresh":
        between = dropped["dropped_unmask_sketch"] + dropped["dropped_masked_input"]
        assert (between[~dropped["aborted"]] > 0).sum() >= 5
    assert dropped["accuracy"].iloc[-1] >= plain["accuracy"].iloc[-1] - 0.02
    steps = ["dropped_share_keys", "dropped_masked_sketch", "dropped_unmask_sketch", "dropped_masked_input",
             "dropped_unmask"]
    assert (dropped["dropped"] == dropped[steps].sum(axis=1)).all()
    assert (dropped["dropped_masked_sketch"].sum() > 0) == (policy == "fresh")


def test_without_masking_an_injected_dropout_vanishes_before_training_and_is_never_aggregated(tmp_path, monkeypatch):
    """secagg.dropout was reset to 0 for a plain round: a sweep `secagg=none,dh secagg.dropout=0.2` compared masked
    rounds that lose clients with plain rounds that lose none. Now each client vanishes before its one upload."""
    from fl import seeds
    from fl.runtime.worker import Worker

    trained, original = [], Worker.train

    def train(self, cid, round):
        trained.append((round, cid))
        return original(self, cid, round)

    monkeypatch.setattr(Worker, "train", train)
    rows = small(tmp_path, "secagg=none", "secagg.dropout=0.3", "fl.num_clients=12", "fl.clients_per_round=8",
                 "fl.rounds=4", "ray.num_workers=3")
    for r in range(4):
        rng = np.random.default_rng(np.random.SeedSequence([0, r, 17]))
        gone = {c for c in seeds.cohort(0, r, 12, 8) if rng.random() < 0.3}
        assert {c for q, c in trained if q == r} == set(seeds.cohort(0, r, 12, 8)) - gone
        assert rows["dropped"].iloc[r] == len(gone)
    assert rows["dropped"].sum() > 0 and not rows["aborted"].any() and rows["accuracy"].iloc[-1] > 0.5
    assert rows["config_hash"].iloc[0] != small(tmp_path, "secagg=none", "fl.num_clients=12", "fl.clients_per_round=8",
                                                "fl.rounds=4", "ray.num_workers=3")["config_hash"].iloc[0]


def test_dropout_below_threshold_aborts_rounds_leaves_the_model_unchanged_and_finishes(tmp_path):
    """0.15 a step loses about 56% of a `fresh` cohort: some rounds keep t = 6 of 10, most do not. An aborted
    round changes nothing: its accuracy and loss equal the round's before, also right after an applied one."""
    rows = small(tmp_path, "secagg.dropout=0.15", "fl.rounds=8")
    aborted = rows["aborted"]
    assert len(rows) == 8 and aborted.any() and not aborted.all()
    assert any(aborted[r] and not aborted[r - 1] for r in rows.index[1:])  # an abort after an applied round
    for r in rows.index[1:]:
        if aborted[r]:
            assert rows["accuracy"][r] == rows["accuracy"][r - 1] and rows["loss"][r] == rows["loss"][r - 1]
        elif not aborted[r - 1]:
            assert rows["loss"][r] != rows["loss"][r - 1]  # an applied round moves the model


def test_a_run_whose_every_round_aborted_says_so_when_it_ends(tmp_path, capsys):
    """It finishes (its rows are the measurement), but a final accuracy of chance must not pass unremarked."""
    rows = small(tmp_path, "secagg.dropout=0.4", "fl.rounds=3")
    assert rows["aborted"].all()
    assert "warning: every round aborted (3 of 3), so the model is the initial one" in capsys.readouterr().err
    small(tmp_path / "fine", "secagg.dropout=0.0", "fl.rounds=2")
    assert "warning" not in capsys.readouterr().err


def test_a_run_whose_final_loss_is_not_finite_says_so_when_it_ends(tmp_path, capsys):
    """A server step of 1e30 leaves the weights finite (so no Diverged) but their outputs overflow: the loss is NaN
    and every later update is refused, yet round 0 applied one, so no other warning fires."""
    rows = small(tmp_path, "secagg=none", "compression=none", "fl.server_lr=1e30", "fl.rounds=2")
    assert rows["loss"].isna().all() and rows["rejected"].iloc[-1] == rows["clients_per_round"].iloc[-1]
    assert "warning: the final model's test loss is nan: its outputs overflow float32" in capsys.readouterr().err
    small(tmp_path / "fine", "secagg=none", "compression=none", "fl.rounds=2")
    assert "warning" not in capsys.readouterr().err


def test_a_run_whose_final_loss_is_no_better_than_a_uniform_guess_says_so_when_it_ends(tmp_path, capsys):
    """Local SGD at lr 3 blows the loss up to about 1e18 with every weight, output and update finite: nothing is
    refused or aborted and the loss is finite, so no other warning fires, yet the model is at chance. The warning
    compares the final loss with ln 10, the uniform prediction's; lr 2 trains and stays silent."""
    rows = small(tmp_path, "secagg=none", "compression=none", "fl.lr=3", "fl.num_clients=5", "fl.clients_per_round=5")
    assert rows["rejected"].eq(0).all() and not rows["aborted"].any()
    assert np.log(10) < rows["loss"].iloc[-1] < np.inf and rows["accuracy"].iloc[-1] < 0.2
    err = capsys.readouterr().err
    assert f"warning: the final model's test loss {rows['loss'].iloc[-1]:.4g} is not below a uniform guess's " \
           "(ln 10 = 2.303): it predicts no better than guessing each class equally" in err and "lower fl.lr" in err
    assert err.count("warning") == 1
    rows = small(tmp_path / "fine", "secagg=none", "compression=none", "fl.lr=2", "fl.num_clients=5",
                 "fl.clients_per_round=5")
    assert rows["loss"].iloc[-1] < 0.5 and "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("top,spread,warned", [(1.0, 0.0002, True), (0.995, 0.009, True), (1.0, 0.02, False),
                                                (0.98, 0.0002, False), (0.11, 3.7, False)])
def test_a_run_whose_final_model_ignores_its_input_says_so_when_it_ends(tmp_path, capsys, top, spread, warned):
    """Masked top-k 0.01 at fl.lr 0.3 on Fashion-MNIST shards ends with dead features: one class for every test
    image, logits varying by 0.0001-0.0011 (results/fmnist/activations.md), a loss just above ln 10. Such a run
    is named for what it is, not as a diverged one; a model sure of one class with logits that vary, or one that
    spreads its answers, is not."""
    from fl.results import RunLog

    log = RunLog(tmp_path, "0123456789ab", "dead")
    log.claim()
    log.start({"seed": 0})
    rows = [{"run_id": "dead", "round": r, "dataset": "fashion_mnist", "clients_per_round": 10, "accuracy": 0.1,
             "loss": 2.3026, "logit_std": spread, "top_class_share": top, "bytes_up": 1, "bytes_down": 1,
             "aborted": 0, "rejected": 0, "dropped": 0} for r in range(3)]
    for row in rows:
        log.write(row)
    log.close()
    sim.finish(log, rows)
    err = capsys.readouterr().err
    said = f"warning: the final model gives one class to {top:.1%} of the test images, its logits varying by " \
           f"{spread:.2g} (std across images): its features are likely dead"
    assert (said in err) == warned and ("experiments.activations" in err) == warned
    assert ("is not below a uniform guess's" in err) == (not warned)  # a loss of ln 10 names the others


def test_a_run_whose_last_rounds_refused_every_update_says_so_when_it_ends(tmp_path, capsys):
    """Local SGD at lr 5 diverges after two rounds: from then on every update is non-finite and refused, the loss
    stays finite and earlier rounds applied updates, so neither of the other warnings fires; the final model is
    round 1's and the run must say so."""
    rows = small(tmp_path, "secagg=none", "compression=none", "fl.lr=5", "fl.rounds=6", "fl.num_clients=5",
                 "fl.clients_per_round=5")
    assert rows["rejected"].tolist() == [0, 0, 5, 5, 5, 5] and rows["loss"].map(np.isfinite).all()
    err = capsys.readouterr().err
    assert "warning: the last 4 of 6 rounds applied no update (in 4 every client's update that arrived was " in err
    assert "the final model is round 1's" in err and "no round applied an update" not in err and "aborted" not in err
    assert "lower fl.lr" in err
    small(tmp_path / "fine", "secagg=none", "compression=none", "fl.rounds=2")
    assert "warning" not in capsys.readouterr().err


def test_a_masked_run_whose_last_rounds_aborted_says_so_when_it_ends(tmp_path, capsys, monkeypatch):
    """Under masking a client whose update is not finite leaves the round: local trainings that diverge from round 2
    on abort the last rounds below the threshold instead, and the final model is again round 1's."""
    train = Worker.train
    monkeypatch.setattr(Worker, "train", lambda self, cid, r: (lambda u, n: (u * np.float32(np.nan if r >= 2 else 1),
                                                                              n))(*train(self, cid, r)))
    rows = small(tmp_path, "secagg=dh", "fl.rounds=6", "fl.num_clients=5", "fl.clients_per_round=5")
    assert rows["aborted"].tolist() == [False, False, True, True, True, True]
    err = capsys.readouterr().err
    assert "warning: the last 4 of 6 rounds applied no update (4 aborted: too few survivors" in err
    assert "the final model is round 1's" in err and "lower fl.lr" in err and "every round aborted" not in err
    (done,) = tmp_path.glob("**/done.json")  # the rows say only that a round aborted; done.json says why
    aborted = json.loads(done.read_text())["aborted"]
    assert [r for r, _ in aborted] == [2, 3, 4, 5]
    assert all(why.startswith("round aborted: 0 clients sent masked input, fewer than t=3") for _, why in aborted)


def test_a_run_whose_every_update_was_rejected_says_so_when_it_ends(tmp_path, capsys):
    """Local SGD at lr 1e20 overflows: every update is non-finite and refused, so no round applies one, and
    no round aborts either (plain rounds go on without refused updates): the run ended with no warning."""
    rows = small(tmp_path, "secagg=none", "compression=none", "fl.lr=1e20", "fl.rounds=2")
    assert (rows["rejected"] == rows["clients_per_round"]).all() and not rows["aborted"].any()
    assert rows["accuracy"].nunique() == 1
    assert "warning: no round applied an update (in 2 of 2 every client's update was rejected or lost" \
        in capsys.readouterr().err
    small(tmp_path / "some", "secagg=none", "compression=none", "fl.rounds=2", "secagg.dropout=0.3")
    assert "warning" not in capsys.readouterr().err
    # dropped before their upload and the rest rejected: still no update applied
    rows = small(tmp_path / "lost", "secagg=none", "compression=none", "fl.lr=1e20", "fl.rounds=2",
                 "secagg.dropout=0.3")
    assert (rows["dropped"] > 0).all() and (rows["rejected"] < rows["clients_per_round"]).all()
    assert "the dropped and rejected columns" in capsys.readouterr().err  # not only the rejected


def test_secaggplus_with_dropouts_applies_the_same_sums_as_full_graph_dh(tmp_path):
    """The same seeded dropouts leave the same survivors, whose exact sum both protocols recover: the models
    are identical while SecAgg+ uploads fewer protocol bytes."""
    settings = ("fl.num_clients=12", "fl.clients_per_round=12", "secagg.dropout=0.05")
    plus = small(tmp_path / "plus", "secagg=secaggplus", *settings)
    full = small(tmp_path / "full", "secagg=dh", *settings)
    # a round aborts alike under both (below t)
    assert (plus["secagg"] == "secaggplus").all() and (plus["aborted"] == full["aborted"]).all()
    assert plus["dropped"].sum() > 0 and not plus["aborted"].all()
    per_step = plus[["dropped_share_keys", "dropped_masked_sketch", "dropped_unmask_sketch", "dropped_masked_input",
                     "dropped_unmask"]].sum(axis=1)
    assert (plus["dropped"] == per_step).all()
    for column in ("dropped", "accuracy", "loss", "bytes_up_payload"):
        np.testing.assert_array_equal(plus[column], full[column])
    assert (plus["bytes_up_protocol"] < full["bytes_up_protocol"]).all()


def test_a_worker_that_dies_mid_round_drops_its_clients_and_the_round_recovers(tmp_path, monkeypatch):
    from fl.runtime.pool import InlinePool

    original = InlinePool.call

    def dies_at(step_that_kills):
        def call(self, step, args, **kw):
            replies = original(self, step, args, **kw)
            if step is step_that_kills and 1 in replies:
                replies[1] = None
            return replies
        return call

    # before the first exchange's sum (fresh's masked summary), or in the only exchange (sketch): the rest go on
    for step, policy, column in ((masked.masked_sketch, "fresh", "dropped_masked_sketch"),
                                 (masked.masked_input, "sketch", "dropped_masked_input")):
        monkeypatch.setattr(InlinePool, "call", dies_at(step))
        rows = small(tmp_path / policy, "ray.num_workers=4", "fl.num_clients=8", "fl.clients_per_round=8",
                     f"compression.index_policy={policy}")
        assert (rows[column] == 2).all() and not rows["aborted"].any()
    # between fresh's two exchanges: its two clients are in the first sum and not the second. Under energies (the
    # default summary) the round goes on without them; under a summary linear in the update (exact, the count
    # sketch) every round aborts
    monkeypatch.setattr(InlinePool, "call", dies_at(masked.masked_values))
    for summary, aborts in (("marginals", False), ("blocks", False), ("exact", True), ("sketch", True)):
        rows = small(tmp_path / f"between-{summary}", "ray.num_workers=4", "fl.num_clients=8",
                     "fl.clients_per_round=8", f"compression.fresh_summary={summary}",
                     "compression.ratio=0.1")  # at the default 0.5 a count sketch is no smaller than the update
        assert rows["index_policy"].str.match(r"fresh(\(|$)").all()  # fresh ran (no fallback to randk)
        assert (rows["dropped_masked_input"] == 2).all() and (rows["aborted"] == aborts).all()


def test_more_workers_than_a_cohort_are_capped_at_the_cohort(tmp_path):
    """An idle worker would hold a model copy and a process for nothing: 8 asked, 3 clients a round, 3 made."""
    rows = small(tmp_path, "secagg=none", "fl.num_clients=10", "fl.clients_per_round=3", "ray.num_workers=8",
                 "fl.rounds=1")
    assert rows["num_workers"].tolist() == [3]


def test_run_server_keeps_the_older_frameworks_call(tmp_path):
    rows = fl.run_server(mask_protocol="DHProtocol", compression_protocol="TopKProtocol",
                         server_with_compression=True, client_with_compression=True, compress_ratio=0.5,
                         rounds=2, backend="inline", model="mlp_small", **{"results.dir": str(tmp_path)})
    assert isinstance(rows, pd.DataFrame) and len(rows) == 2
    assert rows["secagg"].iloc[0] == "dh" and rows["compression"].iloc[0] == "topk"
    assert rows["index_policy"].iloc[0] == "fresh(marginals)"


def test_lenet_on_mnist_format_digits_reaches_093_through_the_real_mnist_reader(tmp_path, mnist_digits_root):
    """The bundled digits written as MNIST IDX files, read by torchvision's MNIST class, trained federated."""
    rows = run(tmp_path, "dataset=mnist", f"dataset.root={mnist_digits_root}", "model=lenet", "fl.rounds=25",
               "secagg=none", "compression=none")
    assert rows["dataset"].iloc[0] == "mnist" and rows["n_params"].iloc[0] == 107_786
    assert rows["accuracy"].iloc[-1] >= 0.93


@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist", "cifar10"])
@pytest.mark.parametrize("model", ["mlp_small", "mlp_large", "lenet", "cnn_wide", "resnet_small"])
def test_every_model_runs_a_federated_round_on_every_dataset(tmp_path, tiny, dataset, model):
    rows = run(tmp_path, f"dataset={dataset}", f"dataset.root={tiny}", f"model={model}", "fl.rounds=1",
               "fl.num_clients=3", "fl.clients_per_round=3", "secagg=none", "fl.local_epochs=1")
    assert rows["n_params"].iloc[0] > 0 and 0 <= rows["accuracy"].iloc[0] <= 1
    assert rows["bytes_up"].iloc[0] > 0


def _replace_worker_0_before_round_3(monkeypatch) -> list[int]:
    """An inline pool whose worker 0 is replaced by a fresh one before round 3, as Ray revives a dead actor;
    returns the list of rounds the pool was asked to revive workers in."""
    from fl.runtime.pool import InlinePool

    original_attach, rounds = InlinePool.attach, []

    def attach(self, data, plan):
        self.data, self.plan = data, plan
        original_attach(self, data, plan)

    def revive(self):
        rounds.append(len(rounds))
        if len(rounds) == 4:  # before round 3
            self.workers[0] = Worker("cpu", 0)
            self.workers[0].attach(self.data, self.plan)
            return [0]
        return []

    monkeypatch.setattr(InlinePool, "attach", attach)
    monkeypatch.setattr(InlinePool, "revive", revive)
    return rounds


def test_a_revived_worker_catches_up_and_trains_its_clients_from_the_model_they_hold(tmp_path, monkeypatch):
    """A worker replaced before round 3 holds no model while the broadcast is a delta: it is sent the dense
    model of round 2 first, so (with no client state to lose) the run is the run without the replacement."""
    settings = ("secagg=none", "compression=topk", "compression.ratio=0.1", "compression.error_feedback=false",
                "fl.rounds=5", "fl.num_clients=6", "fl.clients_per_round=6", "ray.num_workers=2")
    calm = small(tmp_path / "calm", *settings)
    rounds = _replace_worker_0_before_round_3(monkeypatch)
    revived = small(tmp_path / "revived", *settings)
    assert rounds == [0, 1, 2, 3, 4]
    for column in ("accuracy", "loss", "bytes_up", "bytes_down", "catchups"):
        np.testing.assert_array_equal(calm[column], revived[column])


def test_a_worker_replaced_with_its_clients_residuals_says_in_its_row_and_at_the_end_what_was_lost(
        tmp_path, monkeypatch, capsys):
    """Worker 0 (clients 0, 2, 4 of 6, each with a residual) is replaced before round 3: the run goes on with
    their error feedback restarted, and must not pass that off as a run that kept it."""
    _replace_worker_0_before_round_3(monkeypatch)
    rows = small(tmp_path, "secagg=none", "compression=topk", "compression.ratio=0.1", "fl.rounds=5",
                 "fl.num_clients=6", "fl.clients_per_round=6", "ray.num_workers=2")
    residual = 4 * rows["n_params"].iloc[0]
    assert rows["state_bytes"].tolist() == [6 * residual] * 5  # round 3's clients 0, 2, 4 kept new ones
    assert rows["state_lost_bytes"].tolist() == [0, 0, 0, 3 * residual, 0]
    assert f"their clients' state was lost ({3 * residual} bytes of residuals in 1 rounds" in capsys.readouterr().err


def test_workers_replaced_together_each_count_their_clients_lost_residuals(tmp_path, monkeypatch):
    """A node of a cluster lost takes several workers at once (here 0 and 1 of 3, two clients with a residual
    each): the row counts what every one of them held."""
    from fl.runtime.pool import InlinePool

    calls = []

    def revive(self):
        calls.append(1)
        if len(calls) != 4:  # before round 3
            return []
        for w in (0, 1):
            self.workers[w].residuals.clear()  # what a fresh worker holds
        return [0, 1]

    monkeypatch.setattr(InlinePool, "revive", revive)
    rows = small(tmp_path, "secagg=none", "compression=topk", "compression.ratio=0.1", "fl.rounds=4",
                 "fl.num_clients=6", "fl.clients_per_round=6", "ray.num_workers=3")
    residual = 4 * rows["n_params"].iloc[0]
    assert rows["state_lost_bytes"].tolist() == [0, 0, 0, 4 * residual]


def test_a_run_whose_worker_was_replaced_says_so_at_the_end_and_in_done_json_though_no_state_was_lost(
        tmp_path, monkeypatch, capsys):
    """Dense rounds keep no client state, so state_lost_bytes stayed 0 and nothing said that round 2 lost worker 0's
    clients to a death or a hang (ray.call_timeout_s): the run read as an undisturbed one, and a rerun skipped it."""
    _replace_worker_0_before_round_3(monkeypatch)
    rows = small(tmp_path, "secagg=none", "compression=none", "fl.rounds=5", "fl.num_clients=6",
                 "fl.clients_per_round=6", "ray.num_workers=2")
    assert rows["state_lost_bytes"].tolist() == [0] * 5
    assert "replaced before rounds 3 (a death mid-round drops that round's clients" in capsys.readouterr().err
    (done,) = tmp_path.rglob("done.json")
    assert json.loads(done.read_text())["workers_replaced"] == [[3, [0]]]


def test_done_json_holds_the_runs_byte_totals_and_only_round_0_carries_the_start_up(tmp_path):
    rows = small(tmp_path, "secagg=none", "compression.ratio=0.1")
    (done_path,) = tmp_path.rglob("done.json")
    done = json.loads(done_path.read_text())
    assert done["bytes_up"] == rows["bytes_up"].sum() and done["bytes_down"] == rows["bytes_down"].sum()
    assert done["bytes_up"] != done["bytes_down"] and done["rounds"] == len(rows) == 3
    assert rows["t_setup"].iloc[0] > 0 and (rows["t_setup"].iloc[1:] == 0).all()  # summed, it counts once


@pytest.mark.parametrize("overrides,kept", [(["compression=topk", "secagg=none"], True),
                                            (["compression=qsgd", "secagg=none"], False),         # unbiased
                                            (["compression=countsketch", "secagg=dh"], False),    # masked as a table
                                            (["compression=topk", "secagg=none", "compression.client=false"], False)])
def test_the_error_feedback_column_says_whether_clients_kept_residuals_not_how_the_switch_was_set(overrides, kept):
    """compression.error_feedback stays at its default (true) where no client can keep a residual: the column must
    not read as error feedback acting in an unbiased, masked-linear or broadcast-only run."""
    from fl.config import validate
    from fl.plan import Plan

    cfg = validate(fl.compose(overrides))
    assert cfg.compression.error_feedback
    columns = sim.static_columns(cfg, Plan.build(cfg, [100]), "run", "hash", 1, "torch")
    assert columns["error_feedback"] is kept and columns["aggregation"] == "cohort"
    if "compression=countsketch" not in overrides:  # refused under memory and masking
        memory = validate(fl.compose([*overrides, "fl.aggregation=memory"]))
        columns = sim.static_columns(memory, Plan.build(memory, [100]), "run", "hash", 1, "torch")
        assert columns["error_feedback"] is False and columns["aggregation"] == "memory"  # memories, not residuals


def test_with_eval_every_the_last_round_is_evaluated_too(tmp_path):
    rows = run(tmp_path, "model=mlp_small", "fl.rounds=4", "fl.eval_every=2", "secagg=none")
    assert rows["accuracy"].notna().tolist() == [True, False, True, True]


def test_a_carried_evaluation_is_shared_out_by_each_workers_training_steps(tmp_path, monkeypatch):
    """The load a worker's training puts on round r is the last measured seconds per minibatch step times the
    steps its clients will train: their sum is the last round's t_train, and the split is by steps, not clients
    (fl.test_stragglers: nor samples, where stragglers train part of their work)."""
    loads = []
    carried = sim.CarriedEvaluation
    monkeypatch.setattr(sim, "CarriedEvaluation", lambda ev, w, load: (loads.append(load), carried(ev, w, load))[1])
    rows = run(tmp_path, "model=mlp_small", "fl.rounds=4", "secagg=none", "dataset.partition=dirichlet",
               "fl.num_clients=4", "fl.clients_per_round=4", "ray.num_workers=2")
    samples = pd.read_csv(next(tmp_path.rglob("partitions.csv")), index_col=0)["samples"].to_numpy()
    assert loads and samples[[0, 2]].sum() != samples[[1, 3]].sum()
    last = loads[-1]  # round 3 carries round 2's evaluation, timed by round 2's training
    assert sorted(last) == [0, 1] and sum(last.values()) == pytest.approx(rows["t_train"].iloc[2], rel=1e-6)
    steps = 2 * -(-samples // 32)  # two local epochs of batches of 32
    assert last[0] / last[1] == pytest.approx(steps[[0, 2]].sum() / steps[[1, 3]].sum(), rel=1e-6)


def test_done_json_gives_the_last_rounds_accuracy_and_a_masked_rows_per_client_bytes_include_the_protocol(tmp_path):
    rows = run(tmp_path, "model=mlp_small", "fl.rounds=3", "secagg=dh", "fl.num_clients=4", "fl.clients_per_round=4")
    done = json.loads(next(tmp_path.rglob("done.json")).read_text())
    assert done["final_accuracy"] == rows["accuracy"].iloc[-1] != rows["accuracy"].iloc[0]
    assert (rows["bytes_up_protocol"] > 0).all()
    np.testing.assert_allclose(rows["bytes_up_per_client"] * 4, rows["bytes_up"])


def test_residuals_just_over_the_available_memory_are_warned_and_just_under_are_not(monkeypatch, capsys):
    from types import SimpleNamespace

    plan = SimpleNamespace(memory=False, residual_dtype="float32")
    for free, warned in ((7999, True), (8000, False)):
        monkeypatch.setattr(sim, "available_memory", lambda free=free: free)
        sim.announce_residuals(plan, 8000, 4000, 2, local=True)
        assert ("more than the" in capsys.readouterr().err) == warned
