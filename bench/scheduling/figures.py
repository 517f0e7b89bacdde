"""The arithmetic and the tables of the scheduling benchmark: percentiles, Jain's fairness index,
and each figure printed beside its target with a verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated between the closest ranks; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def jain_index(shares: Sequence[float]) -> float:
    """(sum x)^2 / (n * sum x^2): 1 when every party got the same, 1/n when one got everything.
    0 when nobody got anything, so that an empty run never reads as fair."""
    if not shares:
        raise ValueError("Jain's index of no shares")
    squares = sum(x * x for x in shares)
    if squares == 0:
        return 0.0
    return sum(shares) ** 2 / (len(shares) * squares)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure of a scenario; `met` None when nothing is judged (context figures)."""

    scenario: str
    name: str
    target: str
    measured: str
    met: bool | None = None

    @property
    def verdict(self) -> str:
        if self.met is None:
            return "-"
        return "pass" if self.met else "miss"


def judged(
    scenario: str, name: str, target: str, value: float | None, ok: bool | None, unit: str = ""
) -> Figure:
    """A figure whose value may be missing (nothing measured): then it is shown as such and missed."""
    if value is None:
        return Figure(scenario, name, target, "not measured", False)
    return Figure(scenario, name, target, f"{format_number(value)}{unit}", ok)


def context(scenario: str, name: str, measured: str) -> Figure:
    """A figure printed for reading the others, with no target of its own."""
    return Figure(scenario, name, "", measured)


def format_number(value: float) -> str:
    """Counts as counts; other figures to three significant places or so."""
    if value != value:  # NaN
        return "-"
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


HEADER = ("scenario", "figure", "target", "measured", "pass/miss")


def table(figures: Sequence[Figure]) -> str:
    """A Markdown table of the figures, in their order."""
    rows = [HEADER, *((f.scenario, f.name, f.target, f.measured, f.verdict) for f in figures)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([line(rows[0]), rule, *(line(row) for row in rows[1:])])


def tally(figures: Sequence[Figure]) -> str:
    judged_figures = [f for f in figures if f.met is not None]
    passed = sum(1 for f in judged_figures if f.met)
    return f"{passed} of {len(judged_figures)} targets met"
