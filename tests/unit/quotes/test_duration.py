"""Expected durations from a deployment's recent lines, with and without history
(gateway.quotes.duration)."""

from __future__ import annotations

from gateway.quotes.duration import History, LineSpeed, Shape, expected, speed_of, within_window


def test_without_history_there_is_no_expected_duration() -> None:
    took = expected(History([], 0), Shape(lines=10, output_per_line=16, in_flight=10, queue_lines=3))

    assert took.basis == "no history"
    assert (took.expected_s, took.p10_s, took.p90_s) == (None, None, None)
    assert took.queue_lines == 3


def test_a_line_speed_is_its_first_token_then_its_time_a_token() -> None:
    speed = speed_of(latency_ms=1_300, queue_ms=100, ttft_ms=200, completion=11)

    assert speed.ttft_s == 0.2
    assert abs(speed.per_token_s - 0.1) < 1e-9
    assert abs(speed.line_s(21) - (0.2 + 2.0)) < 1e-9


def test_lines_beyond_those_in_flight_take_rounds_and_the_spread_follows_the_history() -> None:
    speeds = [LineSpeed(0.0, per_token) for per_token in (0.01, 0.02, 0.03, 0.04, 0.05)]
    history = History(speeds, batches=2)

    one_round = expected(history, Shape(lines=4, output_per_line=11, in_flight=4, queue_lines=0))
    three_rounds = expected(history, Shape(lines=12, output_per_line=11, in_flight=4, queue_lines=0))

    assert one_round.basis == "history"
    assert one_round.expected_s == 0.3  # the median speed: 10 tokens after the first at 0.03 s
    assert (one_round.p10_s, one_round.p90_s) == (0.1, 0.5)
    assert three_rounds.expected_s == 0.9
    assert three_rounds.history_batches == 2


def test_lines_ahead_on_the_deployment_add_their_rounds() -> None:
    history = History([LineSpeed(0.0, 0.1)], batches=1)

    alone = expected(history, Shape(lines=8, output_per_line=11, in_flight=8, queue_lines=0))
    queued = expected(history, Shape(lines=8, output_per_line=11, in_flight=8, queue_lines=16))

    assert alone.expected_s == 1.0
    assert queued.expected_s == 3.0


def test_a_provider_batch_api_is_bound_by_its_window_with_history_when_there_is_some() -> None:
    bare = within_window([], 86_400, 0)
    seen = within_window([600.0, 60.0, 120.0], 86_400, 0)

    assert (bare.basis, bare.expected_s, bare.bound_s) == ("window", None, 86_400)
    assert (seen.basis, seen.expected_s, seen.p10_s, seen.p90_s) == ("history", 120.0, 60.0, 600.0)
    assert seen.bound_s == 86_400
