"""The mock names the service tier that served an answer as OpenAI does: in a chat completion, in
every chunk of a stream and in a Response; the tier asked for (`auto` served as `default`), or the
one it is told to serve (`serve_tier`), and none when none was asked for."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
RESPONSES: dict[str, Any] = {"model": "m", "input": "hello"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


def chunks(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize(
    ("asked", "named"), [("flex", "flex"), ("priority", "priority"), ("auto", "default")]
)
async def test_a_completion_names_the_tier_asked_for(
    client: httpx.AsyncClient, asked: str, named: str
) -> None:
    answer = (await client.post("/v1/chat/completions", json={**CHAT, "service_tier": asked})).json()
    assert answer["service_tier"] == named


async def test_every_chunk_names_the_tier_it_is_told_to_serve(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "service_tier": "flex", "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-mock-behaviour": json.dumps({"serve_tier": "default"})}

    response = await client.post("/v1/chat/completions", json=body, headers=headers)

    served = chunks(response.text)
    assert served[-1]["usage"] is not None
    assert {chunk["service_tier"] for chunk in served} == {"default"}


async def test_a_response_names_its_tier(client: httpx.AsyncClient) -> None:
    answer = (await client.post("/v1/responses", json={**RESPONSES, "service_tier": "flex"})).json()
    streamed = await client.post("/v1/responses", json={**RESPONSES, "service_tier": "flex", "stream": True})
    assert answer["service_tier"] == "flex"
    assert chunks(streamed.text)[-1]["response"]["service_tier"] == "flex"


async def test_no_tier_is_named_when_none_was_asked_for(client: httpx.AsyncClient) -> None:
    answer = (await client.post("/v1/chat/completions", json=CHAT)).json()
    response = (await client.post("/v1/responses", json=RESPONSES)).json()
    assert "service_tier" not in answer and "service_tier" not in response


async def test_a_message_names_anthropics_tier_in_its_usage(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": CHAT["messages"], "service_tier": "auto"}
    answer = (await client.post("/v1/messages", json=body)).json()
    streamed = await client.post("/v1/messages", json={**body, "stream": True})
    plain = (
        await client.post("/v1/messages", json={k: v for k, v in body.items() if k != "service_tier"})
    ).json()
    assert answer["usage"]["service_tier"] == "standard"
    assert chunks(streamed.text)[0]["message"]["usage"]["service_tier"] == "standard"
    assert "service_tier" not in plain["usage"]
