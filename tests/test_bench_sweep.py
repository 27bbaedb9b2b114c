"""experiments.bench_sweep's figures from a sweep's cell folders (no sweep runs): the first cell's start-up, the
later cells' overhead, cells equal to inline's, and each mode's medians against inline's."""
import json

import pandas as pd
import pytest

from experiments import bench_sweep


def _cell(results, chash, started, rounds_started, rounds_ended, t_round, accuracy=0.5):
    folder = results / chash
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(json.dumps({"started_at": started, "rounds_started_at": rounds_started,
                                                  "rounds_ended_at": rounds_ended}))
    pd.DataFrame({**{c: 0 for c in bench_sweep.COMPUTED}, "config_hash": chash, "round": range(len(t_round)),
                  "accuracy": accuracy, "t_round": t_round}).to_csv(folder / "rounds.csv", index=False)


def test_the_first_cells_start_up_and_the_later_cells_median_wall_beyond_their_rounds(tmp_path):
    for chash, start, rounds in (("c", 0.0, [1.0, 1.0]), ("a", 10.0, [3.0, 1.0]), ("d", 20.0, [0.5]),
                                 ("b", 25.0, [0.5])):
        _cell(tmp_path, chash, start, start + 3, start + 3 + sum(rounds), rounds)
    # first: its start to its first round; then cells a and d (b, the last, has no next start): 10 - 4, 5 - 0.5
    assert bench_sweep.timeline(tmp_path) == (3.0, pytest.approx(5.25))
    _cell(tmp_path / "overlap", "a", 0.0, 1.0, 12.0, [11.0])
    _cell(tmp_path / "overlap", "b", 10.0, 11.0, 13.0, [2.0])
    first, overhead = bench_sweep.timeline(tmp_path / "overlap")  # a cluster's cells run side by side
    assert pd.isna(first) and pd.isna(overhead)


def test_each_mode_is_its_repeats_medians_against_inline_and_its_cells_against_inlines_first_sweep(tmp_path,
                                                                                                  monkeypatch):
    walls = {"inline-0": 10.0, "ray-0": 12.0, "inline-1": 11.0, "ray-1": 15.0}

    def sweep(overrides, results):
        for i, chash in enumerate(("a", "b")):
            differs = results.name == "ray-1" and chash == "b"
            _cell(results, chash, 10.0 * i, 10.0 * i + 1, 10.0 * i + 2, [1.0], 0.9 if differs else 0.5)
        return {"wall_s": walls[results.name], "started": 0.0, "output": ""}

    monkeypatch.setattr(bench_sweep, "sweep", sweep)
    rows = {r["sweep"]: r for r in bench_sweep.measure(["+experiment=quick"], ["inline", "ray"], tmp_path, repeats=2)}
    assert (rows["inline"]["wall_s"], rows["ray"]["wall_s"]) == (10.5, 13.5)
    assert rows["ray"]["vs_inline"] == pytest.approx(13.5 / 10.5) and rows["inline"]["vs_inline"] == 1.0
    assert rows["ray"]["walls_s"] == "12.0 15.0"
    assert (rows["ray"]["cells"], rows["ray"]["equal_to_inline"], rows["inline"]["equal_to_inline"]) == (2, 1, 2)


def test_a_cell_is_equal_to_inlines_only_if_every_outcome_reproduce_compares_is(tmp_path):
    """A cell whose rows differ only in an aborted round or the summary's bytes is another result."""
    from experiments.reproduce import COMPARED

    assert set(COMPARED) <= set(bench_sweep.COMPUTED)
    _cell(tmp_path / "inline", "a", 0.0, 1.0, 2.0, [1.0])
    reference = bench_sweep.cells(tmp_path / "inline")
    for column in COMPARED:
        _cell(tmp_path / column, "a", 0.0, 1.0, 2.0, [1.0])
        rows = pd.read_csv(tmp_path / column / "a" / "rounds.csv")
        rows[column] = 1
        rows.to_csv(tmp_path / column / "a" / "rounds.csv", index=False)
        assert bench_sweep.equal_cells(bench_sweep.cells(tmp_path / column), reference) == 0, column
    assert bench_sweep.equal_cells(reference, reference) == 1
