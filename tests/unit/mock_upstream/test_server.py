"""The ASGI app, driven in-process through httpx.ASGITransport."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app
from tests.support.openapi import validate

USER = [{"role": "user", "content": "Summarise the report."}]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


def sse_payloads(text: str) -> list[Any]:
    """The `data:` payloads of an SSE body, `[DONE]` kept as a string."""
    payloads: list[Any] = []
    for event in text.split("\n\n"):
        for line in event.splitlines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                payloads.append(data if data == "[DONE]" else msgspec.json.decode(data))
    return payloads


async def test_chat_completion_matches_the_openai_schema(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER})
    assert response.status_code == 200
    body = response.json()
    validate("CreateChatCompletionResponse", body)
    words = body["choices"][0]["message"]["content"].split(" ")
    assert len(words) == body["usage"]["completion_tokens"] == 16
    assert body["usage"]["prompt_tokens"] > 0
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_chat_content_is_deterministic_and_follows_the_prompt(client: httpx.AsyncClient) -> None:
    def content(response: httpx.Response) -> str:
        return str(response.json()["choices"][0]["message"]["content"])

    first = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER})
    again = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER})
    other = [{"role": "user", "content": "Something else."}]
    different = await client.post("/v1/chat/completions", json={"model": "m", "messages": other})
    assert content(first) == content(again) != content(different)


async def test_max_tokens_caps_the_completion(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "messages": USER, "max_completion_tokens": 3, "n": 2}
    response = (await client.post("/v1/chat/completions", json=body)).json()
    assert [choice["finish_reason"] for choice in response["choices"]] == ["length", "length"]
    assert response["usage"]["completion_tokens"] == 6
    assert len(response["choices"][0]["message"]["content"].split()) == 3


async def test_chat_stream_is_shaped_as_openai_sends_it(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")
    payloads = sse_payloads(response.text)
    chunks, usage_chunk = payloads[:-2], payloads[-2]
    for chunk in payloads[:-1]:
        validate("CreateChatCompletionStreamResponse", chunk)
    assert all(chunk["usage"] is None for chunk in chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 16
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert len(text.split(" ")) == 16
    assert len(chunks) == 1 + 4 + 1  # role, four content chunks, finish


async def test_chat_stream_without_include_usage_has_no_usage(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/chat/completions", json={"model": "m", "messages": USER, "stream": True}
    )
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    assert all("usage" not in chunk and chunk["choices"] for chunk in payloads[:-1])


async def test_forced_tool_call(client: httpx.AsyncClient) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}  # fmt: skip
    body = {"model": "m", "messages": USER, "tools": [tool], "tool_choice": "required"}
    response = (await client.post("/v1/chat/completions", json=body)).json()
    validate("CreateChatCompletionResponse", response)
    call = response["choices"][0]["message"]["tool_calls"][0]
    assert response["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "lookup"
    assert msgspec.json.decode(call["function"]["arguments"]) == {"q": "mock"}

    streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = sse_payloads(streamed.text)[:-1]
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    arguments = "".join(
        call["function"].get("arguments", "")
        for chunk in chunks
        for call in chunk["choices"][0]["delta"].get("tool_calls") or []
    )
    assert msgspec.json.decode(arguments) == {"q": "mock"}


async def test_text_completion_and_its_stream(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 5}
    response = (await client.post("/v1/completions", json=body)).json()
    validate("CreateCompletionResponse", response)
    assert response["usage"]["completion_tokens"] == 5
    streamed = await client.post(
        "/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    payloads = sse_payloads(streamed.text)
    assert payloads[-1] == "[DONE]"
    # OpenAI streams `finish_reason: null` until the last chunk and `usage: null` until the usage
    # chunk, which this schema (shared with the whole response) does not allow
    for chunk in payloads[:-2]:
        assert chunk.pop("usage") is None
        finished = [
            {**choice, "finish_reason": choice["finish_reason"] or "stop"} for choice in chunk["choices"]
        ]
        validate("CreateCompletionResponse", {**chunk, "choices": finished})
    assert payloads[-3]["choices"][0]["finish_reason"] == "length"
    assert "".join(chunk["choices"][0]["text"] for chunk in payloads[:-2]) == response["choices"][0]["text"]
    assert payloads[-2]["usage"]["completion_tokens"] == 5


async def test_embeddings_as_floats_and_base64(client: httpx.AsyncClient) -> None:
    body = {"model": "e", "input": ["one", "two"], "dimensions": 4}
    floats = (await client.post("/v1/embeddings", json=body)).json()
    validate("CreateEmbeddingResponse", floats)
    assert [len(item["embedding"]) for item in floats["data"]] == [4, 4]
    encoded = (await client.post("/v1/embeddings", json={**body, "encoding_format": "base64"})).json()
    decoded = struct.unpack("<4f", base64.b64decode(encoded["data"][0]["embedding"]))
    assert decoded == pytest.approx(floats["data"][0]["embedding"], abs=1e-6)


async def test_models(client: httpx.AsyncClient) -> None:
    listing = (await client.get("/v1/models")).json()
    validate("ListModelsResponse", listing)
    model = (await client.get("/v1/models/anything")).json()
    validate("Model", model)
    assert model["id"] == "anything"


async def test_azure_paths_need_an_api_version(client: httpx.AsyncClient) -> None:
    path = "/openai/deployments/gpt-dep/chat/completions"
    missing = await client.post(path, json={"messages": USER})
    assert missing.status_code == 404
    response = await client.post(path, params={"api-version": "2024-10-21"}, json={"messages": USER})
    assert response.status_code == 200
    assert response.json()["model"] == "gpt-dep"
    embedded = await client.post("/openai/deployments/emb/embeddings?api-version=1", json={"input": "x"})
    assert embedded.json()["data"][0]["object"] == "embedding"


async def test_bad_requests_get_openai_errors(client: httpx.AsyncClient) -> None:
    no_messages = await client.post("/v1/chat/completions", json={"model": "m"})
    assert no_messages.status_code == 400
    validate("ErrorResponse", no_messages.json())
    unknown = await client.post("/v1/nothing-here", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    bad_override = await client.post(
        "/v1/chat/completions", json={"model": "m", "messages": USER, "mock": {"chunks": -1}}
    )
    assert bad_override.status_code == 400
