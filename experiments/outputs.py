"""Writing a table's files: each is written beside its target and put in place only once all of them are, so a
crash or Ctrl-C mid-way leaves the committed set as it was, never a new CSV beside an old Markdown table."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def together(*paths: Path):
    """Yields a temporary path for each of `paths` (same folder, same suffix, so a plot's format is kept); when
    the block ends without an error each replaces its target (os.replace), else all are removed."""
    temps = [Path(p).with_name(f".{Path(p).stem}.partial-{os.getpid()}{Path(p).suffix}") for p in paths]
    try:
        yield temps
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    for temp, path in zip(temps, paths):
        os.replace(temp, path)
