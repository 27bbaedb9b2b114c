"""experiments.reproduce's comparison: exact, except the one counting rule that changed (a catch-up's length)."""
import pandas as pd
import pytest

from experiments import reproduce


def _rows(code, bytes_down, catchups=(0, 3)):
    return pd.DataFrame({"round": [0, 1], "code": code, "accuracy": [0.5, 0.6], "bytes_down": bytes_down,
                         "catchups": list(catchups)})


def test_rows_from_before_the_catch_up_rule_may_differ_in_bytes_down_by_the_catch_ups_only():
    fresh = _rows("", [1000, 2006])
    diffs, notes = reproduce.compare(_rows("", [1000, 2000]), fresh)  # blank: before commits were recorded
    assert diffs == [] and notes and "bytes_down differs by 6 bytes over 3 catch-ups" in notes[0]
    assert reproduce.compare(_rows("", [1000, 2000]), _rows("", [1000, 2000 + 16 * 3])) == (
        [], [f"bytes_down differs by 48 bytes over 3 catch-ups (rows before {reproduce.CATCHUP_COUNTED[:7]} charged "
             "them at round 0's broadcast length)"])  # 16 bytes a catch-up, no more: within the rule
    diffs, _ = reproduce.compare(_rows("", [1000, 2000 - 16 * 3 - 1]), fresh)  # beyond what the rule explains
    assert diffs and diffs[0].startswith("bytes_down differs in rounds [1]")
    diffs, _ = reproduce.compare(_rows("", [1001, 2006]), fresh)  # no catch-up in round 0: exact
    assert diffs and diffs[0].startswith("bytes_down differs in rounds [0]")


def test_rows_from_the_commit_that_changed_the_rule_on_are_compared_exactly():
    newer = reproduce.CATCHUP_COUNTED[:12]
    assert not reproduce.counted_catchups_as_round_0(newer) and reproduce.counted_catchups_as_round_0("")
    diffs, notes = reproduce.compare(_rows(newer, [1000, 2000]), _rows(newer, [1000, 2006]))
    assert diffs and notes == []
    diffs, _ = reproduce.compare(_rows(newer, [1000, 2000]), _rows(newer, [1000, 2000]).assign(accuracy=[0.5, 0.7]))
    assert diffs == ["accuracy differs in rounds [1]: 0.6 vs 0.7"]


def test_the_commits_are_looked_up_in_the_code_s_repository_whatever_the_working_directory(tmp_path, monkeypatch):
    """Run from outside the checkout, `git merge-base` found no repository: rows from before the rule were
    compared exactly, and every committed cell with catch-ups recorded before it was said to differ."""
    older = "4eda4d26612a"  # the parent of CATCHUP_COUNTED
    monkeypatch.chdir(tmp_path)
    assert reproduce.counted_catchups_as_round_0(older)
    assert reproduce.counted_catchups_as_round_0(older + "+modified")  # its commit, with uncommitted changes
    assert not reproduce.counted_catchups_as_round_0(reproduce.CATCHUP_COUNTED[:12])
    diffs, notes = reproduce.compare(_rows(older, [1000, 2000]), _rows(older, [1000, 2006]))
    assert diffs == [] and "6 bytes over 3 catch-ups" in notes[0]


def test_a_difference_on_another_cpu_is_named_as_such():
    ours = _rows("", [1000, 2000]).assign(env_cpu="Intel Xeon")
    theirs = ours.assign(env_cpu="AMD EPYC", accuracy=[0.5, 0.7])
    diffs, notes = reproduce.compare(theirs, ours)
    assert diffs == ["accuracy differs in rounds [1]: 0.7 vs 0.6"]
    assert notes == ["recorded on AMD EPYC, rerun on Intel Xeon: float results need not match across CPUs; "
                     "compare on the recording CPU"]
    diffs, notes = reproduce.compare(theirs.assign(env_cpu="Intel Xeon"), ours)  # the same CPU: no excuse
    assert diffs and notes == []
    assert reproduce.compare(ours.assign(env_cpu="AMD EPYC"), ours) == ([], [])  # identical: nothing to explain


def test_rows_of_a_run_that_did_not_finish_are_compared_as_far_as_they_go():
    """A killed run keeps fewer rows than its configuration's rounds; comparing them with a full rerun raised
    pandas' 'Can only compare identically-labeled Series objects' after the whole rerun had been spent."""
    newer = reproduce.CATCHUP_COUNTED[:12]
    killed = _rows(newer, [1000, 2000])
    fresh = pd.DataFrame({"round": [0, 1, 2], "code": newer, "accuracy": [0.5, 0.6, 0.7],
                          "bytes_down": [1000, 2000, 3000], "catchups": [0, 3, 3]})
    diffs, notes = reproduce.compare(killed, fresh)
    assert diffs == [] and notes == ["the recorded rows stop after 2 of the 3 rounds rerun (a run that did not "
                                     "finish): only those are compared"]
    diffs, _ = reproduce.compare(killed.assign(accuracy=[0.5, 0.65]), fresh)  # a difference is still found
    assert diffs == ["accuracy differs in rounds [1]: 0.65 vs 0.6"]


def test_the_command_refuses_a_count_that_runs_nothing_before_any_work(tmp_path):
    import subprocess
    import sys

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "rounds.csv").write_text("run_id,round\n")  # killed before its first row
    for args, message in ((["--rounds", "0"], "--rounds must be >= 1, got 0"),
                          (["--workers", "0"], "--workers must be >= 1, got 0"),
                          ([], "holds no rows")):
        out = subprocess.run([sys.executable, "-m", "experiments.reproduce", str(tmp_path), *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_run_that_did_not_finish_is_rerun_only_as_far_as_its_rows_go_and_said_to_be_unfinished(tmp_path, monkeypatch,
                                                                                                 capsys):
    """--rounds past a killed run's rows reran rounds that had nothing to be compared with; a finished run is not
    said to be unfinished."""
    import json
    import sys

    newer = reproduce.CATCHUP_COUNTED[:12]
    asked = []

    def rerun(run_dir, rounds, backend, workers, out):
        asked.append(rounds)
        return pd.DataFrame({"round": list(range(rounds)), "code": newer, "accuracy": 0.5, "bytes_down": 1000,
                             "catchups": 0})

    monkeypatch.setattr(reproduce, "rerun", rerun)
    for name, planned in (("killed", 5), ("done", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"fl": {"rounds": planned}}))
        _rows(newer, [1000, 1000]).assign(catchups=0, accuracy=0.5).to_csv(tmp_path / name / "rounds.csv", index=False)
        monkeypatch.setattr(sys, "argv", ["reproduce", str(tmp_path / name), "--rounds", "4"])
        assert reproduce.main() == 0
    assert asked == [2, 2]
    out = capsys.readouterr().out
    assert out.count("the recorded run did not finish: 2 of its 5 rounds are recorded") == 1
    assert "of its 2 rounds" not in out


def test_rows_kept_before_catch_ups_were_counted_are_compared_exactly_not_stopped_by_a_key_error():
    """Rows without a catchups column (results/topk_digits, the docstring's example, recorded before commits were):
    a bytes_down that differs, as a top-k broadcast's does on another CPU, raised KeyError: 'catchups'."""
    committed = pd.DataFrame({"round": [0, 1], "accuracy": [0.5, 0.6], "bytes_down": [1000, 2000],
                              "env_cpu": "AMD EPYC"})
    fresh = _rows(reproduce.CATCHUP_COUNTED[:12], [1000, 2010], catchups=(0, 0)).assign(bytes_up_sketch=0,
                                                                                       env_cpu="Intel Xeon")
    diffs, notes = reproduce.compare(committed, fresh)
    assert diffs == ["bytes_down differs in rounds [1]: 2000 vs 2010"] and notes[0].startswith("recorded on AMD EPYC")


def test_a_value_blank_on_one_side_differs_except_the_reruns_last_evaluation():
    """A rerun that left a round unevaluated (or a byte count empty) where the committed run has a value was
    called identical: only the rerun's last round, always evaluated, may have what the committed run lacks."""
    newer = reproduce.CATCHUP_COUNTED[:12]
    nan = float("nan")
    rows = lambda accuracy, loss=(1.0, 0.9, 0.8): pd.DataFrame({  # noqa: E731
        "round": [0, 1, 2], "code": newer, "accuracy": accuracy, "loss": list(loss), "bytes_down": 1000, "catchups": 0})
    fresh = rows([0.5, 0.6, 0.7])
    assert reproduce.compare(rows([0.5, 0.6, nan], (1.0, 0.9, nan)), fresh) == ([], [])  # not evaluated there
    assert reproduce.compare(rows([0.5, nan, 0.7]), fresh)[0] == ["accuracy differs in rounds [1]: nan vs 0.6"]
    assert reproduce.compare(fresh, rows([nan, 0.6, 0.7]))[0] == ["accuracy differs in rounds [0]: 0.5 vs nan"]
    assert reproduce.compare(fresh, rows([0.5, 0.6, 0.7], (1.0, nan, 0.8)))[0] == [
        "loss differs in rounds [1]: 0.9 vs nan"]
    assert reproduce.compare(fresh, fresh.assign(bytes_down=[1000, nan, 1000]))[0] == [
        "bytes_down differs in rounds [1]: 1000 vs nan"]
    assert reproduce.compare(fresh.assign(bytes_down=[1000, 1000, nan]), fresh)[0] == [  # only evaluation is excused
        "bytes_down differs in rounds [2]: nan vs 1000"]
    both_blank = rows([0.5, nan, 0.7])
    assert reproduce.compare(both_blank, both_blank) == ([], [])


@pytest.mark.parametrize("column", ["accuracy", "loss", "bytes_up", "bytes_up_payload", "bytes_up_protocol",
                                    "bytes_up_sketch", "bytes_down", "catchups", "rejected", "aborted", "dropped",
                                    "local_steps"])
def test_every_outcome_and_byte_count_is_compared(column):
    newer = reproduce.CATCHUP_COUNTED[:12]
    committed = _rows(newer, [1000, 2000], catchups=(0, 0)).assign(**{column: [1, 2]})
    diffs, _ = reproduce.compare(committed, committed.assign(**{column: [1, 3]}))
    assert diffs == [f"{column} differs in rounds [1]: 2 vs 3"]


def test_a_shorter_rerun_is_compared_over_its_own_rounds():
    """--rounds R reruns the first R rounds of a longer committed run: only those are compared."""
    newer = reproduce.CATCHUP_COUNTED[:12]
    committed = pd.DataFrame({"round": range(4), "code": newer, "accuracy": [0.5, 0.6, 0.7, 0.8], "bytes_down": 1000,
                              "catchups": 0})
    assert reproduce.compare(committed, committed.head(2)) == ([], [])
    assert reproduce.compare(committed, committed.head(2).assign(accuracy=[0.5, 0.65]))[0] == [
        "accuracy differs in rounds [1]: 0.6 vs 0.65"]


def test_a_rerun_writes_its_rows_apart_with_the_backend_asked_and_no_more_rounds_than_planned(tmp_path, monkeypatch):
    """Rerun into the committed cell's own results.dir, fl.run would find it finished and read the committed rows
    back: every comparison identical."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({"backend": "ray", "results": {"dir": "results/topk_digits"},
                                                      "ray": {"num_workers": None}, "fl": {"rounds": 20}}))
    ran = []
    monkeypatch.setattr(reproduce.fl, "run", lambda cfg: ran.append(cfg) or "rows")
    assert reproduce.rerun(tmp_path, 50, "inline", 2, tmp_path / "out") == "rows"
    reproduce.rerun(tmp_path, 3, "ray", None, tmp_path / "out")
    assert [(c.results.dir, c.backend, c.ray.num_workers, c.fl.rounds) for c in ran] == [
        (str(tmp_path / "out"), "inline", 2, 20), (str(tmp_path / "out"), "ray", None, 3)]


def test_the_command_exits_non_zero_when_a_run_differs(tmp_path, monkeypatch, capsys):
    import json
    import sys

    newer = reproduce.CATCHUP_COUNTED[:12]
    (tmp_path / "config.json").write_text(json.dumps({"fl": {"rounds": 2}}))
    _rows(newer, [1000, 2000]).to_csv(tmp_path / "rounds.csv", index=False)
    monkeypatch.setattr(reproduce, "rerun", lambda *a: _rows(newer, [1000, 2000]).assign(accuracy=[0.5, 0.7]))
    monkeypatch.setattr(sys, "argv", ["reproduce", str(tmp_path)])
    assert reproduce.main() == 1
    assert "DIFFERS over 2 rounds" in capsys.readouterr().out
