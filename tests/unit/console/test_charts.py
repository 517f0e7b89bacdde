"""Bar chart layout: round axis steps, stacked bars whose heights are in proportion to their values."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.console import charts
from gateway.console.charts import Series, stacked_bars, tick_step


@pytest.mark.parametrize(
    ("highest", "step"), [(3, 1), (10, 5), (7.9, 2), (0.000032, 0.00001), (0, 1), (1000, 500)]
)
def test_ticks_step_in_ones_twos_and_fives(highest: float, step: float) -> None:
    assert tick_step(highest) == pytest.approx(step)
    assert tick_step(highest) * charts.TICKS >= highest


def test_bars_stack_by_series_and_keep_exact_values() -> None:
    days = ["2026-01-01", "2026-01-02"]
    chart = stacked_bars(
        "requests",
        "Requests",
        days,
        [Series("a", [Decimal(3), Decimal(0)]), Series("b", [Decimal(1), Decimal(2)])],
        lambda v: f"{int(v)}",
        whole=True,
    )
    assert [(bar.day, bar.series, bar.value) for bar in chart.bars] == [
        ("2026-01-01", "a", "3"),
        ("2026-01-01", "b", "1"),
        ("2026-01-02", "b", "2"),
    ]
    a, b_first, b_second = chart.bars
    assert a.height == pytest.approx(3 * b_first.height)
    assert b_first.y + b_first.height == pytest.approx(a.y), "b sits on top of a"
    assert b_second.height == pytest.approx(2 * b_first.height)
    assert [tick.label for tick in chart.ticks] == ["0", "1", "2", "3", "4"]
    assert chart.legend == [(0, "a"), (1, "b")]


def test_a_chart_of_nothing_is_empty() -> None:
    chart = stacked_bars("cost", "Cost", ["2026-01-01"], [Series("all", [Decimal(0)])], str)
    assert chart.empty and chart.ticks
