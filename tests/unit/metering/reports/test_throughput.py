"""Throughput figures from hand-made records, each answer worked out by hand in the comments."""

from __future__ import annotations

import msgspec
import pytest

from gateway.metering.reports.throughput import TimedRecord, bucket_of, covered_s, nearest_rank, throughput

# created_at, status, prompt, cached, completion, latency_ms, ttft_ms
SHORT = TimedRecord(1000.0, 200, 1000, 400, 100, 2000.0, 500.0)  # ends at 1002.0
MEDIUM = TimedRecord(1001.0, 200, 3000, 1000, 200, 3000.0, 1000.0)  # ends at 1004.0
NO_TTFT = TimedRecord(1002.0, 200, 500, 0, 50, 1500.0, None)  # ends at 1003.5
FAILED = TimedRecord(1003.0, 500, 1500, 0, 0, 250.0, None)  # ends at 1003.25
SLOW = TimedRecord(1000.5, 200, 100, 100, 10, 5000.0, 100.0)  # starts second, ends last: 1005.5
BATCH = [SHORT, MEDIUM, NO_TTFT, FAILED, SLOW]


def as_json(value: object) -> object:
    return msgspec.to_builtins(value)


def test_a_batch_has_its_figures_overall() -> None:
    figures = throughput(BATCH)

    assert figures is not None
    assert figures.span_s == 5.5  # 1000.0 to the latest end, 1005.5 (not the last start's end)
    assert as_json(figures.requests) == {"succeeded": 4, "failed": 1}
    assert as_json(figures.tokens) == {"prompt": 6100, "cached": 1500, "completion": 360}
    assert figures.cache_hit_ratio == 0.2459  # 1500 / 6100
    # with a TTFT: SHORT, MEDIUM, SLOW; at the upstream 1000-1002, 1001-1004 and 1000.5-1005.5,
    # which cover 1000-1005.5: uncached prompt 600 + 2000 + 0 over 5.5 s
    assert figures.prefill_tokens_per_s == 472.7273
    assert figures.decode_tokens_per_s == 56.3636  # completion 100 + 200 + 10 over the same 5.5 s
    assert figures.requests_without_ttft == 1  # NO_TTFT; FAILED is counted as failed instead
    # sorted TTFTs 100, 500, 1000: ranks ceil(1.5) = 2, ceil(2.7) = 3, ceil(2.97) = 3
    assert as_json(figures.ttft_ms) == {"p50": 500.0, "p90": 1000.0, "p99": 1000.0}


def test_each_prompt_length_bucket_has_the_same_figures_and_empty_ones_are_left_out() -> None:
    figures = throughput(BATCH)

    assert figures is not None
    short, medium = figures.by_prompt_length
    assert short.prompt_tokens == "0-2k"  # SHORT, NO_TTFT, FAILED, SLOW
    assert short.span_s == 5.5
    assert as_json(short.requests) == {"succeeded": 3, "failed": 1}
    assert as_json(short.tokens) == {"prompt": 3100, "cached": 500, "completion": 160}
    assert short.cache_hit_ratio == 0.1613  # 500 / 3100
    assert short.prefill_tokens_per_s == 109.0909  # 600 over 1000-1005.5 (SHORT and SLOW)
    assert short.decode_tokens_per_s == 20.0  # 110 over the same 5.5 s
    assert short.requests_without_ttft == 1
    assert as_json(short.ttft_ms) == {"p50": 100.0, "p90": 500.0, "p99": 500.0}
    assert medium.prompt_tokens == "2-8k"  # MEDIUM alone
    assert medium.span_s == 3.0
    assert as_json(medium.tokens) == {"prompt": 3000, "cached": 1000, "completion": 200}
    assert medium.cache_hit_ratio == 0.3333
    # 2,000 uncached prompt and 200 completion tokens over 1001-1004
    assert (medium.prefill_tokens_per_s, medium.decode_tokens_per_s) == (666.6667, 66.6667)
    assert as_json(medium.ttft_ms) == {"p50": 1000.0, "p90": 1000.0, "p99": 1000.0}


def test_requests_without_a_ttft_count_in_tokens_but_leave_the_rates_unknown() -> None:
    figures = throughput([NO_TTFT, FAILED])

    assert figures is not None
    assert as_json(figures.tokens) == {"prompt": 2000, "cached": 0, "completion": 50}
    assert figures.cache_hit_ratio == 0.0
    assert (figures.prefill_tokens_per_s, figures.decode_tokens_per_s) == (None, None)
    assert figures.requests_without_ttft == 1
    assert as_json(figures.ttft_ms) == {"p50": None, "p90": None, "p99": None}


def test_concurrent_requests_add_up_to_the_rate_they_were_served_at() -> None:
    # four requests at once, each 1,000 uncached prompt tokens in 1 s and 200 completion tokens in 2 s
    together = [TimedRecord(1000.0, 200, 1000, 0, 200, 3000.0, 1000.0) for _ in range(4)]

    figures = throughput(together)

    assert figures is not None
    assert figures.prefill_tokens_per_s == 1333.3333  # 4,000 tokens over the 3 s 1000-1003, not 12 s
    assert figures.decode_tokens_per_s == 266.6667  # 800 tokens over the same 3 s


def test_the_wait_in_the_queue_is_not_time_at_the_upstream() -> None:
    # arrived at 1000, sent upstream at 1000.5, first token at 1001, done at 1002
    queued = TimedRecord(1000.0, 200, 1000, 0, 100, 2000.0, 500.0, queue_ms=500.0)

    figures = throughput([queued])

    assert figures is not None
    assert figures.prefill_tokens_per_s == 666.6667  # 1,000 over 1000.5-1002, not over 2 s
    assert figures.decode_tokens_per_s == 66.6667  # 100 over the same 1.5 s
    assert figures.span_s == 2.0  # the span is still from the arrival


def test_time_between_requests_is_not_counted() -> None:
    apart = [
        TimedRecord(1000.0, 200, 100, 0, 10, 2000.0, 1000.0),  # at the upstream 1000-1002
        TimedRecord(1010.0, 200, 300, 0, 30, 2000.0, 1000.0),  # at the upstream 1010-1012
    ]

    figures = throughput(apart)

    assert figures is not None
    assert figures.span_s == 12.0
    assert figures.prefill_tokens_per_s == 100.0  # 400 over 4 s, not over the 12 s from 1000 to 1012
    assert figures.decode_tokens_per_s == 10.0  # 40 over 4 s


def test_a_ttft_past_the_end_extends_the_time_at_the_upstream_to_it() -> None:
    # the queue's wait and the TTFT add up to more than the latency (clocks measured apart)
    record = TimedRecord(1000.0, 200, 100, 0, 10, 1000.0, 800.0, queue_ms=400.0)

    figures = throughput([record])

    assert figures is not None
    assert figures.prefill_tokens_per_s == 125.0  # 100 over 1000.4-1001.2 (to the first token)
    assert figures.decode_tokens_per_s == 12.5  # 10 over the same 0.8 s


@pytest.mark.parametrize(
    ("intervals", "seconds"),
    [
        ([], 0.0),
        ([(1.0, 3.0)], 2.0),
        ([(1.0, 3.0), (2.0, 5.0)], 4.0),  # overlapping
        ([(1.0, 10.0), (2.0, 3.0)], 9.0),  # one inside the other
        ([(5.0, 6.0), (1.0, 2.0)], 2.0),  # apart, in any order
        ([(1.0, 2.0), (2.0, 3.0)], 2.0),  # touching
        ([(1.0, 1.0), (4.0, 4.0)], 0.0),  # instants
        ([(3.0, 4.0), (1.0, 2.5), (2.0, 3.5), (7.0, 8.0)], 4.0),  # 1-4 and 7-8
    ],
)
def test_covered_time_is_the_length_of_the_union(
    intervals: list[tuple[float, float]], seconds: float
) -> None:
    assert covered_s(intervals) == pytest.approx(seconds)


def test_a_batch_without_records_has_no_throughput() -> None:
    assert throughput([]) is None


def test_no_prompt_tokens_leaves_the_cache_hit_ratio_unknown() -> None:
    figures = throughput([TimedRecord(5.0, 200, 0, 0, 7, 100.0, 40.0)])

    assert figures is not None
    assert figures.cache_hit_ratio is None
    assert figures.prefill_tokens_per_s == 0.0  # no uncached prompt tokens in 0.1 s
    assert figures.decode_tokens_per_s == 70.0  # 7 / 0.1


@pytest.mark.parametrize(
    ("prompt_tokens", "bucket"),
    [(0, "0-2k"), (2047, "0-2k"), (2048, "2-8k"), (8191, "2-8k"), (8192, "8-32k"), (32767, "8-32k"),
     (32768, "32k+"), (10**9, "32k+")],
)  # fmt: skip
def test_buckets_are_bounded_in_multiples_of_1024_tokens(prompt_tokens: int, bucket: str) -> None:
    assert bucket_of(prompt_tokens) == bucket


def test_percentiles_are_nearest_rank() -> None:
    hundred = [float(n) for n in range(1, 101)]
    assert [nearest_rank(hundred, p) for p in (50, 90, 99)] == [50.0, 90.0, 99.0]
    assert [nearest_rank([7.0], p) for p in (50, 90, 99)] == [7.0, 7.0, 7.0]
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # the lower middle, a value that occurred
    assert nearest_rank([], 50) is None
