"""The Anthropic-compatible endpoint (POST /v1/messages), through the ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app

SYSTEM = [{"type": "text", "text": "Extract every date. " * 50, "cache_control": {"type": "ephemeral"}}]


def request(question: str = "When?", **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 64, "system": SYSTEM,
            "messages": [{"role": "user", "content": question}], **extra}  # fmt: skip


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour(completion_tokens=6))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = []
    for block in text.strip().split("\n\n"):
        name, data = block.split("\n")
        parsed.append((name.removeprefix("event: "), msgspec.json.decode(data.removeprefix("data: "))))
    return parsed


async def test_message_with_cache_write_then_read(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/messages", json=request("first?"))).json()
    second = (await client.post("/v1/messages", json=request("second?"))).json()
    assert first["type"] == "message"
    assert first["stop_reason"] == "end_turn"
    assert len(first["content"][0]["text"].split()) == first["usage"]["output_tokens"] == 6
    assert first["usage"]["cache_creation_input_tokens"] > 0
    assert first["usage"]["cache_read_input_tokens"] == 0
    assert second["usage"]["cache_read_input_tokens"] == first["usage"]["cache_creation_input_tokens"]
    assert second["usage"]["cache_creation_input_tokens"] == 0
    assert second["usage"]["input_tokens"] == first["usage"]["input_tokens"]


async def test_stream_follows_the_anthropic_event_sequence(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=request(stream=True))
    parsed = events(response.text)
    names = [name for name, _ in parsed]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert all(name == payload["type"] for name, payload in parsed)
    text = "".join(payload["delta"]["text"] for name, payload in parsed if name == "content_block_delta")
    assert len(text.split(" ")) == 6
    assert parsed[0][1]["message"]["usage"]["cache_creation_input_tokens"] > 0
    assert parsed[-2][1]["usage"] == {"output_tokens": 6}
    assert parsed[-2][1]["delta"]["stop_reason"] == "end_turn"


async def test_forced_tool_use(client: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"date": {"type": "string"}}, "required": ["date"]}
    tools = [{"name": "record_date", "input_schema": schema}]
    body = request(tools=tools, tool_choice={"type": "tool", "name": "record_date"})
    message = (await client.post("/v1/messages", json=body)).json()
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0]["type"] == "tool_use"
    assert message["content"][0]["input"] == {"date": "mock"}
    streamed = events((await client.post("/v1/messages", json={**body, "stream": True})).text)
    partial = "".join(p["delta"]["partial_json"] for name, p in streamed if name == "content_block_delta")
    assert msgspec.json.decode(partial) == {"date": "mock"}


async def test_max_tokens_is_required_and_limits_output(client: httpx.AsyncClient) -> None:
    body = request()
    del body["max_tokens"]
    missing = await client.post("/v1/messages", json=body)
    assert missing.status_code == 400
    assert missing.json()["type"] == "error"
    assert missing.json()["error"]["type"] == "invalid_request_error"
    short = (await client.post("/v1/messages", json=request(max_tokens=2))).json()
    assert short["stop_reason"] == "max_tokens"
    assert short["usage"]["output_tokens"] == 2


async def test_injected_failures_use_the_anthropic_error_format(client: httpx.AsyncClient) -> None:
    body = request(mock={"fail_rate": 1, "fail_status": 529})
    response = await client.post("/v1/messages", json=body)
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"
