"""Which CPU a run's rows came from, and the letters tables and plots name CPUs by: a run's environment key has
no CPU, and seconds compare only between runs of one host."""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

UNKNOWN = "unknown"  # rows kept before the CPU was a column


def of(rows: pd.DataFrame) -> str:
    """The CPU one run's rows name."""
    cpu = rows["env_cpu"].iloc[0] if "env_cpu" in rows else None
    return cpu if isinstance(cpu, str) and cpu else UNKNOWN


def pooled(hosts: Iterable[str]) -> str:
    """The hosts of a line's runs, as one value ('A + B' once lettered)."""
    return " + ".join(sorted(set(hosts)))


def letters(values: Iterable[str]) -> dict[str, str]:
    """A letter for each host named in `values` (pooled or single), in sorted order, as every table gives them."""
    return {h: chr(ord("A") + i) for i, h in enumerate(sorted({h for v in values for h in v.split(" + ")}))}


def lettered(value: str, tag: dict[str, str]) -> str:
    """A line's host value (one CPU or a pooled 'X + Y') in letters."""
    return " + ".join(tag[h] for h in value.split(" + "))


def legend(tag: dict[str, str]) -> str:
    return "; ".join(f"{letter} = {host}" for host, letter in tag.items())
