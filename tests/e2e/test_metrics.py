"""/metrics after real traffic through `gateway serve`: every series moves by what the requests did."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import MAX_BODY, Stack
from tests.e2e.test_errors import CHAT, post

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(stack: Stack) -> Series:
    reply = httpx.get(stack.gateway.base_url + "/metrics", timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def moved(before: Series, after: Series, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def scrape_once_counted(stack: Stack, before: Series, requests: int, **labels: str) -> Series:
    """The series once `requests` more requests are counted, or as they are after 5 s.

    A stream is counted when the gateway sees its upstream end, which can be just after the
    client has read `data: [DONE]`."""
    deadline = time.monotonic() + 5
    while True:
        after = scrape(stack)
        if (
            moved(before, after, "gateway_requests_total", **labels) >= requests
            or time.monotonic() > deadline
        ):
            return after
        time.sleep(0.05)


def test_requests_tokens_latency_and_overhead_count_every_request(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("metrics-traffic")
    client = stack.client(team.key)
    before = scrape(stack)

    completions = [
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": f"count {i}"}])
        for i in range(3)
    ]
    chunks = list(
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "stream"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    route = {"model": "chat", "provider": "up-openai"}
    after = scrape_once_counted(stack, before, 4, **route, status="200")

    usages = [c.usage for c in completions] + [chunks[-1].usage]
    assert all(u is not None for u in usages)
    prompt = sum(u.prompt_tokens for u in usages if u is not None)
    completion = sum(u.completion_tokens for u in usages if u is not None)
    assert moved(before, after, "gateway_requests_total", **route, status="200") == 4
    assert moved(before, after, "gateway_tokens_total", **route, kind="prompt") == prompt
    assert moved(before, after, "gateway_tokens_total", **route, kind="completion") == completion
    assert moved(before, after, "gateway_request_latency_seconds_count", provider="up-openai") == 4
    assert moved(before, after, "gateway_request_latency_seconds_sum", provider="up-openai") > 0
    # only the stream has a time to first token: a non-streaming answer's whole time is none
    assert moved(before, after, "gateway_upstream_ttft_seconds_count", provider="up-openai") == 1
    assert moved(before, after, "gateway_overhead_seconds_count") == 4  # the stream's too
    overhead = moved(before, after, "gateway_overhead_seconds_sum")
    assert 0 < overhead < 4 * 0.5  # the gateway's own time, upstream excluded: well under 0.5 s each
    buckets = [
        moved(before, after, "gateway_overhead_seconds_bucket", le=le)
        for le in ("0.0001", "0.001", "0.01", "0.1", "+Inf")
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 4  # cumulative buckets


def test_an_upstream_failure_counts_as_an_upstream_error(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("metrics-failure")
    before = scrape(stack)
    fresh_upstream.set_behaviour(fail_rate=1.0, fail_status=500)
    assert post(stack, team.key, CHAT).status_code == 502
    after = scrape(stack)

    errors = [
        value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "gateway_upstream_errors_total" and ("provider", "up-openai") in labels
    ]
    assert sum(errors) == 1
    assert (
        moved(before, after, "gateway_requests_total", model="chat", provider="up-openai", status="502") == 1
    )


def test_the_gauges_are_exposed(stack: Stack) -> None:
    series = scrape(stack)
    gauges = ("gateway_open_circuits", "gateway_active_batch_pins", "gateway_metering_backlog")
    gauges += ("gateway_metering_oldest_unwritten_seconds", "gateway_usage_dead_letters")
    for gauge in gauges:
        assert (gauge, ()) in series
        assert series[(gauge, ())] >= 0


def test_the_serving_loop_is_watched_for_lag(stack: Stack) -> None:
    before = scrape(stack)
    time.sleep(0.35)  # three or more of the probe's 100 ms ticks
    after = scrape(stack)
    assert moved(before, after, "gateway_event_loop_lag_seconds_count") >= 2
    assert moved(before, after, "gateway_event_loop_lag_seconds_bucket", le="+Inf") >= 2


def test_requests_refused_before_any_upstream_are_counted_from_both_fronts(
    stack: Stack, fresh_upstream
) -> None:
    team = stack.new_team("metrics-refused")
    before = scrape(stack)
    assert post(stack, "sk-gw-" + "1" * 43, CHAT).status_code == 401  # the proxy front
    assert post(stack, None, CHAT).status_code == 401
    assert post(stack, team.key, {**CHAT, "model": "no-such-model"}).status_code == 404
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    assert post(stack, team.key, big).status_code == 413
    models = httpx.get(stack.base_url + "/models", headers={"authorization": "Bearer nope"}, timeout=10)
    assert models.status_code == 401  # Litestar's
    assert httpx.get(stack.base_url + "/no/such/thing", timeout=10).status_code == 404
    fresh_upstream.set_behaviour(fail_rate=1.0, fail_status=500)
    assert post(stack, team.key, CHAT).status_code == 502  # reached an upstream: not a refusal
    after = scrape(stack)

    refused = "gateway_requests_refused_total"
    chat = {"endpoint": "chat/completions"}
    assert moved(before, after, refused, **chat, status="401", code="invalid_api_key") == 1
    assert moved(before, after, refused, **chat, status="401", code="missing_api_key") == 1
    assert moved(before, after, refused, **chat, status="404", code="model_not_found") == 1
    assert moved(before, after, refused, **chat, status="413", code="request_too_large") == 1
    assert moved(before, after, refused, endpoint="models", status="401", code="invalid_api_key") == 1
    assert moved(before, after, refused, endpoint="other", status="404", code="unsupported_endpoint") == 1
    assert sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == refused) == 6
    assert (
        moved(before, after, "gateway_requests_total", model="chat", provider="up-openai", status="502") == 1
    )
