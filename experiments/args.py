"""Argument types the experiment scripts share: a value that cannot make a measurement is refused when the
command is read, naming the option, never met as a traceback inside a cell (or after other cells ran)."""
from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer >= 1 (a count: repetitions, clients, entries, rounds)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return value


def share(text: str) -> float:
    """A number in [0, 1) (a dropout rate: a client vanishing at every step would only ever abort)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number in [0, 1)")
    return value


def positive(text: str) -> float:
    """A finite number > 0 (seconds, a budget)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0")
    return value


def summary(doc: str) -> str:
    """A script's `--help` description: its docstring's first paragraph, whole (its first line can stop
    mid-sentence)."""
    return " ".join(doc.strip().split("\n\n")[0].split())
