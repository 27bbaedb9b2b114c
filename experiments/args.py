"""Argument types the experiment scripts share: a value that cannot make a measurement is refused when the
command is read, naming the option, never met as a traceback inside a cell (or after other cells ran)."""
from __future__ import annotations

import argparse
import math


def _number(text: str, convert, ok, expected: str):
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (a count: repetitions, clients, entries, rounds)."""
    return _number(text, int, lambda v: v >= 1, "an integer >= 1")


def seed_number(text: str) -> int:
    """A seed in [0, 2**32) (numpy's and torch's, as fl.config's `seed`)."""
    return _number(text, int, lambda v: 0 <= v < 2**32, "a seed in [0, 2**32)")


def share(text: str) -> float:
    """A number in [0, 1) (a dropout rate: a client vanishing at every step would only ever abort)."""
    return _number(text, float, lambda v: 0 <= v < 1, "a number in [0, 1)")


def ratio(text: str) -> float:
    """A compression ratio in (0, 1] (the share of entries a sparsifier keeps)."""
    return _number(text, float, lambda v: 0 < v <= 1, "a ratio in (0, 1]")


def sparse_ratio(text: str) -> float:
    """A ratio in (0, 1) for a grid of sparsifiers beside their dense baseline: at 1 top-k is run as the dense
    baseline itself (fl.config's `compression=none`), read twice."""
    return _number(text, float, lambda v: 0 < v < 1, "a ratio in (0, 1) (at 1 a sparsifier is the dense baseline)")


def accuracy(text: str) -> float:
    """An accuracy in (0, 1] (a rounds-to-target threshold)."""
    return _number(text, float, lambda v: 0 < v <= 1, "an accuracy in (0, 1]")


def positive(text: str) -> float:
    """A finite number > 0 (seconds, a budget)."""
    return _number(text, float, lambda v: 0 < v < math.inf, "a finite number > 0")


def each_once(parser, option: str, values) -> None:
    """Refuses a value given twice: a cell measured twice breaks the table's lookups after every cell ran
    (bench_secagg), and a grid reads the finished run again, counting one run as two seeds with no spread."""
    values = list(values)
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        parser.error(f"{option}: {', '.join(str(v) for v in twice)} given more than once")


def summary(doc: str) -> str:
    """A script's `--help` description: its docstring's first paragraph, whole (its first line can stop
    mid-sentence)."""
    return " ".join(doc.strip().split("\n\n")[0].split())
