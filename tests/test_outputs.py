"""A table's files are replaced together, only once all are written: a crash leaves the committed set whole."""
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
