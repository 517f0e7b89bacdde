"""The pure parts of the scheduling benchmark (bench/scheduling): percentiles, Jain's index, the
figures' table, and the per-window and per-slot accounting of the fairness and priority scenarios."""

from __future__ import annotations

import pytest

from bench.scheduling.fairness import WINDOW_S, WINDOWS, window_tokens
from bench.scheduling.figures import Figure, context, jain_index, judged, percentile, table, tally
from bench.scheduling.load import Outcome
from bench.scheduling.priority import slot_seconds


def test_percentile_interpolates_between_the_closest_ranks() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([10.0, 20.0], 25) == pytest.approx(12.5)


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 99) is None


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_one_winner() -> None:
    assert jain_index([7.0, 7.0, 7.0]) == pytest.approx(1.0)
    assert jain_index([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([2.0, 1.0]) == pytest.approx(9 / 10)  # (2+1)^2 / (2 * (4+1))


def test_jain_index_of_nothing_served_is_zero_and_of_no_shares_an_error() -> None:
    assert jain_index([0.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match="no shares"):
        jain_index([])


def test_a_table_lines_up_every_figure_with_its_verdict() -> None:
    figures = [
        judged("caps", "max at the simulator", "<= 32", 32, True),
        judged("cost", "added CPU per request", "<= +0.03 ms", 0.0412, False, " ms"),
        context("seed", "direct time", "8.17 s"),
        judged("priority", "queue wait p99", "<= 50 ms", None, None, " ms"),
    ]
    lines = table(figures).splitlines()
    assert lines[0].split("|")[1:-1] == [" scenario ", " figure                ", " target      ",
                                         " measured     ", " pass/miss "]  # fmt: skip
    assert {len(line) for line in lines} == {len(lines[0])}
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[2:]]
    assert cells == [
        ["caps", "max at the simulator", "<= 32", "32", "pass"],
        ["cost", "added CPU per request", "<= +0.03 ms", "0.041 ms", "miss"],
        ["seed", "direct time", "", "8.17 s", "-"],
        ["priority", "queue wait p99", "<= 50 ms", "not measured", "miss"],
    ]
    assert tally(figures) == "1 of 3 targets met"


def test_a_figure_without_a_target_has_no_verdict() -> None:
    assert Figure("seed", "setup", "", "64 blocks").verdict == "-"


def _outcome(label: str, started: float, ended: float, tokens: int = 0, queue_ms: float | None = None,
             error: str | None = None) -> Outcome:  # fmt: skip
    return Outcome(label, started, ended, error, queue_ms, None, tokens, 0, 0)


def test_fairness_spreads_each_answer_over_the_time_it_held_the_replica() -> None:
    start = 100.0
    outcomes = [
        _outcome("light", start, start + 1.0, tokens=10, queue_ms=0.0),  # wholly in the first window
        _outcome(
            "light", start + WINDOW_S - 1.0, start + WINDOW_S + 1.0, tokens=20, queue_ms=0.0
        ),  # half each
        _outcome("light", start - 5.0, start + 1.0, tokens=30, queue_ms=4000.0),  # dispatched at start - 1
        _outcome(
            "light", start, start + 0.5, tokens=5, queue_ms=0.0, error="429 queue_timeout"
        ),  # not served
        _outcome("heavy", start, start + 1.0, tokens=1000, queue_ms=0.0),
        _outcome("light", start - 3.0, start - 1.0, tokens=7, queue_ms=0.0),  # in the warm-up
    ]
    light = window_tokens(outcomes, "light", start)
    assert light[0] == pytest.approx(10 + 10 + 15)
    assert light[1] == pytest.approx(10)
    assert light[2:] == [0.0] * (WINDOWS - 2)
    assert window_tokens(outcomes, "heavy", start)[0] == pytest.approx(1000)


def test_a_slot_is_held_from_dispatch_to_the_end_within_the_window() -> None:
    outcomes = [
        _outcome("batch", 0.0, 5.0, queue_ms=1000.0),  # dispatched at 1.0, ends at 5.0
        _outcome("batch", 9.0, 12.0, queue_ms=0.0),  # runs past the window's end at 10.0
        _outcome("batch", 2.0, 3.0, error="500 upstream_error"),
        _outcome("interactive", 2.0, 3.0, queue_ms=0.0),
    ]
    assert slot_seconds(outcomes, "batch", start=2.0, end=10.0) == pytest.approx(3.0 + 1.0)
    assert slot_seconds(outcomes, "interactive", start=2.0, end=10.0) == pytest.approx(1.0)
