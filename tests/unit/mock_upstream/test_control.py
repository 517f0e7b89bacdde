"""Behaviour control, failure injection and request recording, through the ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import MockUpstreamApp, create_mock_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def app() -> MockUpstreamApp:
    return create_mock_app(MockBehaviour(completion_tokens=5))


@pytest.fixture
async def client(app: MockUpstreamApp) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


async def completion_tokens(client: httpx.AsyncClient, **kwargs: object) -> int:
    response = await client.post("/v1/chat/completions", **kwargs)  # type: ignore[arg-type]
    return int(response.json()["usage"]["completion_tokens"])


async def test_precedence_flags_then_put_then_header_then_body(client: httpx.AsyncClient) -> None:
    assert await completion_tokens(client, json=CHAT) == 5
    put = await client.put("/_mock/behaviour", json={"completion_tokens": 7})
    assert put.json()["completion_tokens"] == 7
    assert (await client.get("/_mock/behaviour")).json()["completion_tokens"] == 7
    assert await completion_tokens(client, json=CHAT) == 7
    header = {"x-mock-behaviour": '{"completion_tokens": 9}'}
    assert await completion_tokens(client, json=CHAT, headers=header) == 9
    both = {**CHAT, "mock": {"completion_tokens": 11}}
    assert await completion_tokens(client, json=both, headers=header) == 11


async def test_put_replaces_and_patch_merges(client: httpx.AsyncClient) -> None:
    await client.put("/_mock/behaviour", json={"latency_ms": 1, "chunks": 2})
    replaced = (await client.put("/_mock/behaviour", json={"chunks": 3})).json()
    assert replaced["latency_ms"] == 0
    patched = (await client.patch("/_mock/behaviour", json={"latency_ms": 1})).json()
    assert (patched["chunks"], patched["latency_ms"]) == (3, 1)
    refused = await client.put("/_mock/behaviour", json={"fail_rate": 2})
    assert refused.status_code == 400


async def test_failures_follow_the_seeded_rate(client: httpx.AsyncClient) -> None:
    async def pattern() -> list[int]:
        await client.put("/_mock/behaviour", json={"fail_rate": 0.5, "seed": 7})
        return [(await client.post("/v1/chat/completions", json=CHAT)).status_code for _ in range(20)]

    first, second = await pattern(), await pattern()
    assert first == second
    assert set(first) == {200, 500}


async def test_rate_limit_failure_carries_retry_after(client: httpx.AsyncClient) -> None:
    await client.put("/_mock/behaviour", json={"fail_rate": 1, "fail_status": 429, "retry_after": 2})
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


async def test_garbage_answers_200_with_a_non_json_body(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={**CHAT, "mock": {"garbage": True}})
    assert response.status_code == 200
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(response.content)


async def test_omit_usage(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "mock": {"omit_usage": True}}
    assert "usage" not in (await client.post("/v1/chat/completions", json=body)).json()
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    text = (await client.post("/v1/chat/completions", json=streamed)).text
    assert '"usage":{' not in text


async def test_requests_are_recorded_exactly_and_in_order(client: httpx.AsyncClient) -> None:
    await client.delete("/_mock/requests")
    first = {**CHAT, "mock": {"completion_tokens": 1}}
    await client.post("/v1/chat/completions?x=1", json=first, headers={"authorization": "Bearer k"})
    await client.post("/v1/embeddings", content=b"not json")
    recorded = (await client.get("/_mock/requests")).json()
    assert [r["path"] for r in recorded] == ["/v1/chat/completions", "/v1/embeddings"]
    assert recorded[0]["body"] == first
    assert recorded[0]["query"] == {"x": "1"}
    assert recorded[0]["headers"]["authorization"] == "Bearer k"
    assert recorded[1]["body"] == "not json"
    stats = (await client.get("/_mock/stats")).json()
    assert stats == {"total": 2, "paths": {"/v1/chat/completions": 1, "/v1/embeddings": 1}}
    assert (await client.delete("/_mock/requests")).status_code == 204
    assert (await client.get("/_mock/requests")).json() == []


async def test_record_keeps_the_newest(app: MockUpstreamApp) -> None:
    recorder = app.upstream.recorder
    for index in range(10_005):
        recorder.record("POST", f"/p{index}", "", {}, None)
    kept = recorder.requests()
    assert len(kept) == 10_000
    assert kept[0].path == "/p5"
    assert recorder.stats()["total"] == 10_005


async def test_clearing_the_cache_makes_the_next_request_write_again(client: httpx.AsyncClient) -> None:
    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "q"}]
    body = {"model": "m", "prompt_cache_key": "k", "messages": messages}

    async def cached() -> int:
        usage = (await client.post("/v1/chat/completions", json=body)).json()["usage"]
        return int(usage["prompt_tokens_details"]["cached_tokens"])

    assert [await cached(), await cached()] == [0, 104]
    await client.delete("/_mock/cache")
    assert await cached() == 0
