"""Writing a table's files: each is written beside its target and put in place only once all of them are, so a
crash or Ctrl-C mid-way leaves the committed set as it was, never a new CSV beside an old Markdown table."""
from __future__ import annotations

import os
import re
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def together(*paths: Path):
    """Yields a temporary path for each of `paths` (same folder, same suffix, so a plot's format is kept); when
    the block ends without an error each is flushed to disk and replaces its target (os.replace), else all are
    removed."""
    temps = [Path(p).with_name(f".{Path(p).stem}.partial-{os.getpid()}{Path(p).suffix}") for p in paths]
    try:
        yield temps
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    for temp in temps:  # else a power loss may keep a rename and lose its file's text: an empty committed table
        with open(temp, "rb") as f:
            os.fsync(f.fileno())
    for temp, path in zip(temps, paths):
        os.replace(temp, path)


def write_table(out, title: str, command: str, about: str, table, md: str) -> None:
    """`<out>.md` (the title, the command that made it, what it is about, the Markdown table) and `<out>.csv`
    (`table`, a DataFrame), together; the folder is made if need be."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with together(table_file(path, ".csv"), table_file(path, ".md")) as (csv, markdown):
        table.to_csv(csv, index=False)
        markdown.write_text("\n".join([f"# {title}", "", f"Regenerate: `{command}`", "", about, "", md]))


def table_file(out, suffix: str) -> Path:
    """The file `<out><suffix>` of a table written to --out `out`. An `out` ending in .md or .csv has that suffix
    swapped; any other dot is part of the name (Path.with_suffix would make `--out results/budget_0.015` write
    results/budget_0.md, the file `--out results/budget_0.01` writes too)."""
    out = Path(out)
    if out.suffix in (".md", ".csv"):
        out = out.with_suffix("")
    return out.with_name(out.name + suffix)


def check_target(md: Path, command: str, force: bool = False) -> None:
    """Before any work: refuse to replace a table that another command made (other seeds, `--quick`, other
    ratios), which would silently put a different table where the committed one was, or a file no command made
    (results/README.md). Its own command, another `--out`, or `--force` (which is not part of the command) write."""
    md = Path(md)
    if force or not md.exists():
        return
    made = re.search(r"^Regenerate: `([^`]*)`", md.read_text(errors="replace"), re.MULTILINE)
    if made is None:
        raise SystemExit(f"{md} exists and no command made it (it has no `Regenerate:` line): this would replace it "
                         "with a table. Write elsewhere with --out, or add --force")
    if _words(made.group(1)) != _words(command):
        raise SystemExit(f"{md} was made by `{made.group(1)}`, not `{command}`: this would replace that table with "
                         "another. Rerun its own command to regenerate it, write elsewhere with --out, or add --force")


def _words(command: str) -> list[str]:
    """A recorded command's words as a shell reads them (the line itself, if no shell could read it)."""
    try:
        return shlex.split(command)
    except ValueError:
        return [command]


def command_line(module: str, argv) -> str:
    """`python -m <module> <args>` as the table records it (without --force), quoted as a shell (and
    experiments.regenerate) reads it back: a folder with a space in its name is one word."""
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", "-m", module, *(a for a in args if a != "--force")])


def number_range(values) -> str:
    """Integers as a table's text: three or more consecutive as a range, others listed: 0, 1, 2, 3, 4 -> '0-4',
    0, 1, 2, 4 -> '0-2, 4', '0, 1', '0, 2'."""
    spans: list[list[int]] = []  # [first, last] of each run of consecutive integers
    for x in sorted({int(x) for x in values}):
        if spans and x == spans[-1][1] + 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return ", ".join(f"{a}-{b}" if b - a > 1 else ", ".join(map(str, range(a, b + 1))) for a, b in spans)
