"""Stacked bar charts by day, laid out here and drawn as inline SVG by the templates (no script).

`stacked_bars` turns a value per day and series into rectangles, a y axis with round ticks and a
legend. Every rectangle carries its day, series and exact value (as text), so that what a chart
shows can be read back, by a person hovering it or by a test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

WIDTH, HEIGHT = 640.0, 220.0
LEFT, RIGHT, TOP, BOTTOM = 64.0, 8.0, 10.0, 26.0  # margins: y labels on the left, days below
TICKS = 4
MAX_DAY_LABELS = 8
PALETTE = 8  # series colours in the stylesheet: .s0 ... .s7


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    day: str
    series: str
    value: str  # the exact figure, formatted
    colour: int  # index into the palette


@dataclass(frozen=True, slots=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True, slots=True)
class DayLabel:
    x: float
    text: str


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[Decimal]  # one per day


@dataclass(frozen=True, slots=True)
class BarChart:
    metric: str
    title: str
    bars: list[Bar]
    ticks: list[Tick]
    day_labels: list[DayLabel]
    legend: list[tuple[int, str]]  # (colour, series name)
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right_edge: float = WIDTH - RIGHT
    baseline: float = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not self.bars


def tick_step(top_value: float, ticks: int = TICKS) -> float:
    """A round step (1, 2 or 5 times a power of ten) such that `ticks` steps reach `top_value`."""
    if top_value <= 0:
        return 1.0
    wanted = top_value / ticks
    power = 10 ** math.floor(math.log10(wanted))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= wanted))


def stacked_bars(
    metric: str,
    title: str,
    days: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[Decimal], str],
    *,
    whole: bool = False,
) -> BarChart:
    """One bar per day, its segments the series' values stacked in order; zero values draw nothing.
    `whole`: the values are counts, so the axis has no tick between two whole numbers."""
    totals = [sum((s.values[i] for s in series), Decimal(0)) for i in range(len(days))]
    highest = float(max(totals, default=Decimal(0)))
    step = tick_step(highest)
    if whole:
        step = max(step, 1.0)
    top = step * TICKS
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(days), 1)
    bar_w = max(slot * 0.7, 1.0)
    bars: list[Bar] = []
    for i, day in enumerate(days):
        stacked = 0.0
        x = LEFT + i * slot + (slot - bar_w) / 2
        for colour, one in enumerate(series):
            value = one.values[i]
            if value <= 0:
                continue
            height = float(value) / top * plot_h
            stacked += height
            bars.append(
                Bar(x, TOP + plot_h - stacked, bar_w, height, day, one.name, fmt(value), colour % PALETTE)
            )
    ticks = [Tick(TOP + plot_h - plot_h * n / TICKS, fmt(Decimal(str(step)) * n)) for n in range(TICKS + 1)]
    every = max(1, math.ceil(len(days) / MAX_DAY_LABELS))
    labels = [DayLabel(LEFT + i * slot + slot / 2, day[5:]) for i, day in enumerate(days) if i % every == 0]
    legend = [(colour % PALETTE, one.name) for colour, one in enumerate(series)]
    return BarChart(metric, title, bars, ticks, labels, legend)
