"""The pure parts of rate windows: which windows bind, GCRA arithmetic, corrections."""

from __future__ import annotations

import pytest

from gateway.limits.windows import (
    WINDOW_US,
    Window,
    corrected_tat,
    weigh,
    windows_for,
)
from tests.unit.limits.conftest import principal


def test_windows_bind_only_where_a_limit_is_set() -> None:
    windows = windows_for(principal(key_tpm=100, team_rpm=5))

    assert windows == [Window("key", "key_a", "tokens", 100), Window("team", "team_a", "requests", 5)]


def test_limit_requests_fit_at_once_and_the_next_waits_one_interval() -> None:
    window = Window("team", "t", "requests", 7)  # an interval that is not a whole microsecond count
    tat = None
    for _ in range(7):
        check = weigh(window, tat, 0.0, 1)
        assert check.fits
        tat = check.tat_us

    refused = weigh(window, tat, 0.0, 1)

    assert not refused.fits
    assert refused.wait_us == pytest.approx(WINDOW_US / 7)
    assert refused.remaining == 0
    assert refused.reset_us == pytest.approx(WINDOW_US)


def test_a_refused_request_leaves_the_window_as_it_was() -> None:
    window = Window("key", "k", "tokens", 100)
    full = weigh(window, None, 0.0, 100).tat_us

    assert weigh(window, full, 0.0, 1).tat_us == full


def test_correction_never_refunds_below_an_empty_window() -> None:
    window = Window("key", "k", "tokens", 600)  # 100 ms a token

    assert corrected_tat(window, 50_000.0, 0.0, -10) == 0.0
    assert corrected_tat(window, None, 1_000.0, 5) == 501_000.0


def test_a_correction_never_pushes_a_window_more_than_two_minutes_ahead() -> None:
    window = Window("key", "k", "tokens", 1000)

    assert corrected_tat(window, None, 0.0, 3_000_000_000) == 2 * WINDOW_US
