"""experiments.regenerate reruns the committed tables' commands that read kept rows, and only those."""
import pytest

import fl
from experiments import regenerate, report


@pytest.fixture
def tables(tmp_path):
    """A folder holding one report table made from a real two-round run, and a table an experiment made. The runs'
    folder has a space in its name: the recorded command quotes it, as the shell that regenerate reads it as does."""
    runs = tmp_path / "my runs"
    fl.run(fl.compose(["backend=inline", "model=mlp_small", "fl.rounds=2", "secagg=none", f"results.dir={runs}"]))
    root = tmp_path / "results"
    report.main([str(runs), "--out", str(root / "digits")])
    (root / "bench.md").write_text("# A benchmark\n\nRegenerate: `python -m experiments.codec_bench --quick`\n")
    return root


def test_a_report_table_edited_by_hand_is_rewritten_and_an_experiments_table_is_left(tables, capsys):
    table = tables / "digits" / "topk_table.md"
    made = table.read_text()
    table.write_text(made.replace("\n|", "\n| 9", 1))  # a cell that no longer matches the rows
    assert table.read_text() != made
    assert regenerate.main(["--root", str(tables)]) == 0
    assert table.read_text() == made
    out = capsys.readouterr().out
    assert f"running: {table}" in out and f"not run (experiments.codec_bench runs experiments): {tables / 'bench.md'}" \
        in out


def test_list_runs_nothing_and_match_picks_commands(tables, capsys):
    table = tables / "digits" / "topk_table.md"
    table.write_text(table.read_text() + "edited\n")
    assert regenerate.main(["--root", str(tables), "--list"]) == 0
    assert table.read_text().endswith("edited\n") and "would run" in capsys.readouterr().out
    assert [t.name for t, _ in regenerate.commands(tables, match="codec_bench")] == ["bench.md"]
    with pytest.raises(SystemExit, match="containing 'no such text'"):
        regenerate.main(["--root", str(tables), "--match", "no such text"])


def test_a_command_that_fails_is_named_and_the_exit_is_nonzero(tmp_path, capsys):
    (tmp_path / "t.md").write_text(f"Regenerate: `python -m experiments.report {tmp_path / 'none'} --out {tmp_path}`\n")
    assert regenerate.main(["--root", str(tmp_path)]) == 1
    assert f"failed: {tmp_path / 't.md'} (exit" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="is not a folder"):
        regenerate.main(["--root", str(tmp_path / "missing")])
