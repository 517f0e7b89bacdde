"""The hot-path metrics: what requests add up to, exposed as Prometheus families when scraped."""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics.instruments import Metrics
from gateway.services import watch_loop_lag
from tests.unit.metering.conftest import EventFactory

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics: Metrics) -> Series:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    }


def test_events_add_up_by_route_and_provider(make_event: EventFactory) -> None:
    metrics = Metrics()
    metrics.observe_event(make_event(prompt_tokens=100, completion_tokens=20, cached_tokens=64, ttft_ms=30.0))
    metrics.observe_event(make_event(prompt_tokens=50, completion_tokens=5, latency_ms=250.0))
    metrics.observe_event(
        make_event(status=502, prompt_tokens=0, completion_tokens=0, error_code="upstream_error")
    )
    metrics.observe_event(make_event(model="other", provider="anthropic-eu", latency_ms=7.0))

    series = scrape(metrics)

    route = (("model", "gpt-4o"), ("provider", "openai-us"))
    assert series[("gateway_requests_total", (*route, ("status", "200")))] == 2
    assert series[("gateway_requests_total", (*route, ("status", "502")))] == 1
    assert series[("gateway_tokens_total", (("kind", "prompt"), *route))] == 150
    assert series[("gateway_tokens_total", (("kind", "completion"), *route))] == 25
    assert series[("gateway_tokens_total", (("kind", "cached"), *route))] == 64
    assert (
        series[("gateway_upstream_errors_total", (("code", "upstream_error"), ("provider", "openai-us")))]
        == 1
    )
    openai = (("provider", "openai-us"),)
    assert series[("gateway_request_latency_seconds_count", openai)] == 3
    assert abs(series[("gateway_request_latency_seconds_sum", openai)] - (0.1234567 * 2 + 0.25)) < 1e-9
    assert series[("gateway_upstream_ttft_seconds_count", openai)] == 1
    assert series[("gateway_request_latency_seconds_count", (("provider", "anthropic-eu"),))] == 1


def test_histogram_buckets_are_cumulative_and_a_bound_holds_its_own_value() -> None:
    metrics = Metrics()
    for seconds in (0.00005, 0.0001, 0.0003, 0.002, 0.5):
        metrics.observe_overhead(seconds)

    series = scrape(metrics)

    def bucket(le: str) -> float:
        return series[("gateway_overhead_seconds_bucket", (("le", le),))]

    assert bucket("0.0001") == 2  # 0.0001 itself is in the bucket `le="0.0001"`
    assert bucket("0.00025") == 2
    assert bucket("0.0005") == 3
    assert bucket("0.0025") == 4
    assert bucket("0.1") == 4
    assert bucket("+Inf") == 5 == series[("gateway_overhead_seconds_count", ())]
    assert abs(series[("gateway_overhead_seconds_sum", ())] - 0.50245) < 1e-9


def test_an_unscraped_app_exposes_its_families_empty() -> None:
    series = scrape(Metrics())
    assert series[("gateway_overhead_seconds_count", ())] == 0
    assert ("gateway_open_circuits", ()) in series


def test_a_blocked_event_loop_shows_as_lag() -> None:
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(watch_loop_lag(metrics, interval_s=0.01))
        await asyncio.sleep(0.05)  # a few prompt ticks
        time.sleep(0.08)  # the loop held: the tick due meanwhile runs ~80 ms late
        await asyncio.sleep(0.05)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    asyncio.run(scenario())
    series = scrape(metrics)

    def bucket(le: str) -> float:
        return series[("gateway_event_loop_lag_seconds_bucket", (("le", le),))]

    count = series[("gateway_event_loop_lag_seconds_count", ())]
    assert count >= 5
    assert bucket("+Inf") - bucket("0.05") >= 1  # the held tick, and only lateness from holding it
    assert bucket("0.05") >= count - 2  # the other ticks were on time
    assert series[("gateway_event_loop_lag_seconds_sum", ())] >= 0.05
