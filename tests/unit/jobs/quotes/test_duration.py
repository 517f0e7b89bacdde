"""Expected durations from a deployment's recent batches, with and without history
(gateway.jobs.quotes.duration)."""

from __future__ import annotations

import pytest

from gateway.jobs.quotes.duration import MIN_SPREAD, BatchSpeed, Shape, batch_speed, expected, within_window
from gateway.metering.reports.throughput import TimedRecord


def shape(
    lines: int = 10, prompt: int = 1000, output: int = 100, in_flight: int = 10, queue: int = 0
) -> Shape:
    return Shape(lines=lines, prompt=prompt, output=output, in_flight=in_flight, queue_lines=queue)


def test_without_history_there_is_no_expected_duration() -> None:
    took = expected([], shape(queue=3))

    assert took.basis == "no history"
    assert (took.expected_s, took.p10_s, took.p90_s) == (None, None, None)
    assert took.queue_lines == 3


def sequential_batch(lines: int) -> list[TimedRecord]:
    """Lines one after another, each 100 uncached prompt tokens prefilled in 0.1 s, then 11 output
    tokens over 1 s: 1,000 prompt tokens/s and 10 output tokens/s, one line at a time."""
    return [
        TimedRecord(
            created_at=i * 1.1,
            status=200,
            prompt_tokens=100,
            cached_tokens=0,
            completion_tokens=11,
            latency_ms=1100,
            ttft_ms=100,
        )
        for i in range(lines)
    ]


def test_a_batch_estimates_its_own_span() -> None:
    records = sequential_batch(5)
    speed = batch_speed(records)

    assert speed is not None
    assert speed.prefill_per_s == pytest.approx(1000) and speed.decode_per_s == pytest.approx(11)
    assert speed.generating == pytest.approx(1.0)
    assert speed.estimate(prompt=500, output=55, in_flight=1) == pytest.approx(5.5)


def test_fewer_lines_in_flight_than_the_history_had_decode_slower() -> None:
    speed = BatchSpeed(prefill_per_s=1000, decode_per_s=640, generating=64, overlap=1.0)

    assert speed.estimate(prompt=0, output=640, in_flight=64) == pytest.approx(1.0)
    assert speed.estimate(prompt=0, output=640, in_flight=16) == pytest.approx(4.0)
    assert speed.estimate(prompt=2000, output=640, in_flight=64) == pytest.approx(3.0)


def test_the_spread_is_the_batches_p10_to_p90_and_at_least_the_minimum() -> None:
    speeds = [
        BatchSpeed(prefill_per_s=1e9, decode_per_s=rate, generating=1, overlap=1) for rate in (5, 10, 20)
    ]
    one = speeds[1:2]

    spread = expected(speeds, shape(prompt=0, output=100, in_flight=1))
    narrow = expected(one, shape(prompt=0, output=100, in_flight=1))

    assert (spread.expected_s, spread.p10_s, spread.p90_s) == (10.0, 5.0, 20.0)
    assert spread.history_batches == 3
    assert (narrow.expected_s, narrow.p10_s, narrow.p90_s) == (
        10.0,
        10 * (1 - MIN_SPREAD),
        10 * (1 + MIN_SPREAD),
    )


def test_lines_ahead_on_the_deployment_add_their_share() -> None:
    speeds = [BatchSpeed(prefill_per_s=1e9, decode_per_s=10, generating=1, overlap=1)]

    alone = expected(speeds, shape(lines=8, prompt=0, output=80, in_flight=1))
    queued = expected(speeds, shape(lines=8, prompt=0, output=80, in_flight=1, queue=16))

    assert alone.expected_s == 8.0
    assert queued.expected_s == 24.0


def test_a_provider_batch_api_is_bound_by_its_window_with_history_when_there_is_some() -> None:
    bare = within_window([], 86_400, 0)
    seen = within_window([600.0, 60.0, 120.0], 86_400, 0)

    assert (bare.basis, bare.expected_s, bare.bound_s) == ("window", None, 86_400)
    assert (seen.basis, seen.expected_s, seen.p10_s, seen.p90_s) == ("history", 120.0, 60.0, 600.0)
    assert seen.bound_s == 86_400
