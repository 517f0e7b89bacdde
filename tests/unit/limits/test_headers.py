"""OpenAI's header formats for rate limits."""

from __future__ import annotations

import pytest

from gateway.limits.headers import go_duration, rate_limited
from gateway.limits.windows import Window, WindowCheck


@pytest.mark.parametrize(
    ("microseconds", "expected"),
    [
        (0, "0s"),
        (-5, "0s"),
        (1, "1ms"),
        (120_000, "120ms"),
        (1_000_000, "1s"),
        (1_500_000, "1.5s"),
        (8_640_000, "8.64s"),
        (60_000_000, "1m0s"),
        (360_000_000, "6m0s"),
        (83_400_000, "1m23.4s"),
        (3_600_000_000, "1h0m0s"),
    ],
)
def test_go_duration(microseconds: float, expected: str) -> None:
    assert go_duration(microseconds) == expected


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    window = Window("key", "k", "requests", 100)
    check = WindowCheck(window, 1, tat_us=60_000_000.0, now_us=0.0, wait_us=250.0)

    error = rate_limited([check])

    assert error.headers["retry-after"] == "1"
    assert error.headers["retry-after-ms"] == "1"


def test_the_longest_wait_names_the_refusal() -> None:
    short = WindowCheck(Window("key", "k", "requests", 100), 1, 60e6, 0.0, wait_us=600_000.0)
    long = WindowCheck(Window("team", "t", "tokens", 1000), 50, 60e6, 0.0, wait_us=3_000_000.0)

    error = rate_limited([short, long])

    assert error.headers["retry-after"] == "3"
    assert "tokens per min (TPM) for team t" in error.message
