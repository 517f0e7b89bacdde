"""The real subprocess (`python -m mock_upstream`), driven by the official SDKs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

USER: Any = [{"role": "user", "content": "Name three rivers."}]  # the SDKs want their TypedDicts


@pytest.fixture(scope="module")
def upstream() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture(completion_tokens=8, chunk_delay_ms=1)


@pytest.fixture
def fresh(upstream: RunningUpstream) -> RunningUpstream:
    upstream.clear()
    upstream.set_behaviour(completion_tokens=8)
    return upstream


def test_openai_sdk_chat_and_stream(fresh: RunningUpstream) -> None:
    client = openai.OpenAI(base_url=f"{fresh.base_url}/v1", api_key="sk-test", max_retries=0)
    completion = client.chat.completions.create(model="m", messages=USER)
    validate("CreateChatCompletionResponse", completion.model_dump(exclude_unset=True))
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 8
    stream = client.chat.completions.create(
        model="m",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == completion.choices[0].message.content
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    embedding = client.embeddings.create(model="e", input="x", dimensions=8)
    assert len(embedding.data[0].embedding) == 8  # the SDK asks for base64 and decodes it
    recorded = fresh.requests()
    assert [r["path"] for r in recorded] == ["/v1/chat/completions"] * 2 + ["/v1/embeddings"]
    assert recorded[0]["headers"]["authorization"] == "Bearer sk-test"


def test_openai_sdk_sees_injected_failures(fresh: RunningUpstream) -> None:
    fresh.set_behaviour(fail_rate=1, fail_status=429, retry_after=1)
    client = openai.OpenAI(base_url=f"{fresh.base_url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert raised.value.response.headers["retry-after"] == "1"
    assert fresh.stats()["total"] == 1


def test_dropped_stream_breaks_the_connection(fresh: RunningUpstream) -> None:
    fresh.set_behaviour(fail_after_chunks=2)
    body = {"model": "m", "messages": USER, "stream": True}
    received: list[bytes] = []
    url = f"{fresh.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body) as response, pytest.raises(httpx.RemoteProtocolError):  # noqa: PT012
        for chunk in response.iter_raw():  # the drop comes mid-iteration
            received.append(chunk)
    assert b"".join(received).count(b"data: ") == 2


def test_anthropic_sdk_message_and_stream(fresh: RunningUpstream) -> None:
    client = anthropic.Anthropic(base_url=fresh.base_url, api_key="sk-ant", max_retries=0)
    system: Any = [{"type": "text", "text": "Be brief. " * 80, "cache_control": {"type": "ephemeral"}}]
    message = client.messages.create(model="claude-x", max_tokens=100, system=system, messages=USER)
    assert message.usage.output_tokens == 8
    assert message.usage.cache_creation_input_tokens == 200
    with client.messages.stream(model="claude-x", max_tokens=100, system=system, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert text == block.text
    assert final.usage.cache_read_input_tokens == 200
    assert final.usage.output_tokens == 8
    headers = fresh.requests()[0]["headers"]
    assert "anthropic-version" in headers
    assert "sk-ant" in headers.get("x-api-key", headers.get("authorization", ""))


def test_hang_times_out_and_leaves_the_server_serving(fresh: RunningUpstream) -> None:
    fresh.set_behaviour(hang=True)
    body = {"model": "m", "messages": USER}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{fresh.base_url}/v1/chat/completions", json=body, timeout=0.3)
    fresh.set_behaviour()
    assert httpx.post(f"{fresh.base_url}/v1/chat/completions", json=body).status_code == 200
