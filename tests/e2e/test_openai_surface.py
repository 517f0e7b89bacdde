"""The OpenAI SDK against `gateway serve` in front of a real fake upstream: the happy paths."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import Stack, Team
from tests.support.openapi import validate


def test_chat_non_streaming_passes_fields_and_names_the_route(
    stack: Stack, team_a: Team, fresh_upstream
) -> None:
    client = stack.client(team_a.key)
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hello"}],
        temperature=0.2,
        extra_body={"seed": 7, "logit_bias": {"50256": -100}},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.prompt_tokens_details is not None
    validate("CreateChatCompletionResponse", raw.http_response.json())
    assert raw.headers["x-gateway-provider"] == "up-openai"
    assert raw.headers["x-gateway-region"] == "us-east"
    assert raw.headers["x-request-id"].startswith("req_")
    assert float(raw.headers["x-gateway-overhead-ms"]) >= 0
    sent = fresh_upstream.requests()[-1]
    assert sent["body"]["model"] == "upstream-chat"
    assert sent["body"]["seed"] == 7 and sent["body"]["logit_bias"] == {"50256": -100}
    assert sent["body"]["temperature"] == 0.2
    assert sent["headers"]["authorization"] == "Bearer upstream-secret-openai"


def test_chat_streaming_strips_usage_the_client_did_not_ask_for(
    stack: Stack, team_a: Team, fresh_upstream
) -> None:
    client = stack.client(team_a.key)
    chunks = list(
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert chunks, "no chunks"
    assert all(chunk.usage is None for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert fresh_upstream.requests()[-1]["body"]["stream_options"] == {"include_usage": True}


def test_chat_streaming_keeps_usage_when_asked(stack: Stack, team_a: Team, fresh_upstream) -> None:
    client = stack.client(team_a.key)
    chunks = list(
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    final = chunks[-1]
    assert final.choices == [] and final.usage is not None and final.usage.completion_tokens > 0
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.model_dump(exclude_unset=True))


def test_streaming_over_raw_http_is_sse_with_done(stack: Stack, team_a: Team) -> None:
    import httpx

    with httpx.stream(
        "POST",
        stack.base_url + "/chat/completions",
        headers={"authorization": f"Bearer {team_a.key}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "x"}], "stream": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-gateway-provider"] == "up-openai"
        body = b"".join(response.iter_raw())
    events = [e for e in body.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"


def test_completions(stack: Stack, team_a: Team) -> None:
    result = stack.client(team_a.key).completions.create(model="chat", prompt="Say hi", max_tokens=5)
    assert result.choices[0].text
    assert result.usage is not None and result.usage.completion_tokens <= 5


def test_embeddings(stack: Stack, team_a: Team) -> None:
    raw = stack.client(team_a.key).embeddings.with_raw_response.create(
        model="embed", input=["a", "b"], encoding_format="float"
    )
    result = raw.parse()
    assert len(result.data) == 2 and len(result.data[0].embedding) > 0
    validate("CreateEmbeddingResponse", raw.http_response.json())


def test_models_list_and_get(stack: Stack, team_a: Team) -> None:
    client = stack.client(team_a.key)
    ids = {m.id for m in client.models.list()}
    assert {"chat", "claude", "embed", "chat-azure"} <= ids
    assert client.models.retrieve("claude").id == "claude"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_azure_deployment_url_and_header(stack: Stack, team_a: Team, fresh_upstream) -> None:
    completion = stack.client(team_a.key).chat.completions.create(
        model="chat-azure", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content
    sent = fresh_upstream.requests()[-1]
    assert sent["path"] == "/openai/deployments/azure-chat/chat/completions"
    assert sent["query"]["api-version"] == "2024-10-21"
    assert sent["headers"]["api-key"] == "upstream-secret-azure"
