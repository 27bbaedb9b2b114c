"""experiments.reproduce's comparison: exact, except the one counting rule that changed (a catch-up's length)."""
import pandas as pd

from experiments import reproduce


def _rows(code, bytes_down, catchups=(0, 3)):
    return pd.DataFrame({"round": [0, 1], "code": code, "accuracy": [0.5, 0.6], "bytes_down": bytes_down,
                         "catchups": list(catchups)})


def test_rows_from_before_the_catch_up_rule_may_differ_in_bytes_down_by_the_catch_ups_only():
    fresh = _rows("", [1000, 2006])
    diffs, notes = reproduce.compare(_rows("", [1000, 2000]), fresh)  # blank: before commits were recorded
    assert diffs == [] and notes and "6 bytes over 3 catch-ups" in notes[0]
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
