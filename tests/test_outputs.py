"""A table's files are replaced together, only once all are written: a crash leaves the committed set whole."""
from pathlib import Path

import pytest

from experiments.outputs import together


def test_a_crash_mid_way_leaves_every_file_as_it_was_and_no_temporary_behind(tmp_path):
    csv, md = tmp_path / "t.csv", tmp_path / "t.md"
    csv.write_text("old csv")
    md.write_text("old md")
    with pytest.raises(KeyboardInterrupt):
        with together(csv, md) as (new_csv, new_md):
            new_csv.write_text("new csv")
            raise KeyboardInterrupt  # before the Markdown was written
    assert (csv.read_text(), md.read_text()) == ("old csv", "old md")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.md"]


def test_the_files_are_replaced_once_all_are_written_and_keep_their_suffix(tmp_path):
    csv, png = tmp_path / "t.csv", tmp_path / "plot.png"
    with together(csv, png) as (new_csv, new_png):
        assert new_png.suffix == ".png" and new_png.parent == tmp_path  # matplotlib picks the format from it
        new_csv.write_text("a,b\n")
        new_png.write_bytes(b"png")
        assert not csv.exists()
    assert csv.read_text() == "a,b\n" and png.read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "t.csv"]


def test_every_file_is_on_disk_before_any_replaces_its_target(tmp_path, monkeypatch):
    """The temporaries were renamed unflushed: after a power loss a table could be empty or cut short."""
    import os

    events, fsync, replace = [], os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("fsync", os.fstat(fd).st_ino)) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(a))) or replace(a, b))
    with together(tmp_path / "t.csv", tmp_path / "t.md") as temps:
        for temp in temps:
            temp.write_text("x")
    inodes = [(tmp_path / name).stat().st_ino for name in ("t.csv", "t.md")]
    names = [str(t) for t in temps]
    assert events == [("fsync", inodes[0]), ("fsync", inodes[1]), ("replace", names[0]), ("replace", names[1])]


def test_a_table_made_by_another_command_is_not_replaced_unless_forced(tmp_path, capsys):
    """A narrower rerun (one seed, --quick) to a committed table's path replaced it silently."""
    from experiments.outputs import check_target, command_line

    md = tmp_path / "t.md"
    md.write_text("# A table\n\nRegenerate: `python -m experiments.field_bits --seeds 0 1 2` (60 s here)\n")
    check_target(md, command_line("experiments.field_bits", ["--seeds", "0", "1", "2"]))  # its own command
    narrower = command_line("experiments.field_bits", ["--seeds", "0"])
    with pytest.raises(SystemExit, match=r"was made by `python -m experiments.field_bits --seeds 0 1 2`, not "
                                         r"`python -m experiments.field_bits --seeds 0`"):
        check_target(md, narrower)
    check_target(md, narrower, force=True)
    check_target(tmp_path / "elsewhere.md", narrower)  # a new path
    notes = tmp_path / "README.md"  # a file no command made (results/README.md): never replaced unless forced
    notes.write_text("# Results\n\nWritten by hand.\n")
    with pytest.raises(SystemExit, match="no command made it"):
        check_target(notes, narrower)
    check_target(notes, narrower, force=True)
    assert command_line("experiments.report", ["runs", "--force"]) == "python -m experiments.report runs"
    spaced = command_line("experiments.report", ["my runs", "--label", "my runs=it's"])
    assert spaced == """python -m experiments.report 'my runs' --label 'my runs=it'"'"'s'"""
    md.write_text(f"Regenerate: `{spaced}`\n")
    check_target(md, spaced)
    with pytest.raises(SystemExit, match="was made by"):
        check_target(md, command_line("experiments.report", ["my", "runs", "--label", "my runs=it's"]))


def test_the_recorded_command_of_a_script_run_from_the_shell_is_its_arguments_after_the_program(monkeypatch):
    """main(None), as `python -m` calls it, reads sys.argv: its first item is the program, not an argument."""
    import sys

    from experiments.outputs import command_line

    monkeypatch.setattr(sys, "argv", ["/x/experiments/field_bits.py", "--seeds", "0", "--force"])
    assert command_line("experiments.field_bits", None) == "python -m experiments.field_bits --seeds 0"


def test_the_report_refuses_to_replace_another_commands_table_before_reading_any_run(tmp_path):
    from experiments import report

    out = tmp_path / "table"
    out.mkdir()
    (out / "topk_table.md").write_text("# Top-k results\n\nRegenerate: `python -m experiments.report a --out x`\n")
    with pytest.raises(SystemExit, match="was made by"):
        report.main([str(tmp_path / "no-such-folder"), "--out", str(out)])  # refused before the folder is read


def test_a_dot_in_out_is_part_of_the_tables_name_and_a_table_suffix_given_is_swapped(tmp_path):
    from experiments.outputs import table_file

    assert table_file("results/budget_0.015", ".md") == Path("results/budget_0.015.md")
    assert table_file("results/budget_0.015", "_sweeps.csv") == Path("results/budget_0.015_sweeps.csv")
    assert table_file("results/field_bits.md", ".csv") == Path("results/field_bits.csv")
    assert table_file("results/field_bits.csv", "_sweeps.csv") == Path("results/field_bits_sweeps.csv")
    assert table_file(tmp_path / "t", ".md") == tmp_path / "t.md"


def test_tables_out_at_two_ratios_are_two_tables_not_one_refused_or_replaced(tmp_path, monkeypatch):
    """--out results/masked_budget_0.01 and _0.015 both wrote results/masked_budget_0.{csv,md}: the second was
    refused as another command's table, and with --force replaced it."""
    import pandas as pd

    from experiments import field_bits

    def runs(settings, seeds, *_):
        return pd.DataFrame([{"setting": label, "seed": seed, "partition": "iid", "host": "cpu",
                              "compression": "none" if "compression=none" in overrides else "topk",
                              "ratio": 1.0 if "compression=none" in overrides else 0.01,
                              "secagg": "dh" if "secagg=dh" in overrides else "none", "policy_ran": "p",
                              "accuracy": 0.9, "bytes_up": 1e6, "bytes_down": 1e6, "s_per_round": 0.1}
                             for label, overrides in settings for seed in seeds])

    monkeypatch.setattr(field_bits, "run_grid", runs)
    for name in ("budget_0.01", "budget_0.015"):
        field_bits.main(["--ratios", "0.01", "--widths", "16", "--seeds", "0", "--out", str(tmp_path / name)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget_0.01.csv", "budget_0.01.md", "budget_0.015.csv",
                                                          "budget_0.015.md"]
