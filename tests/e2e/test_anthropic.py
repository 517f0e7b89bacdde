"""The Anthropic translation round trip through the OpenAI SDK, streaming and not, tools included."""

from __future__ import annotations

import json

from tests.e2e.conftest import Stack, Team
from tests.support.openapi import validate

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_messages_translate_both_ways(stack: Stack, team_a: Team, fresh_upstream) -> None:
    raw = stack.client(team_a.key).chat.completions.with_raw_response.create(
        model="claude",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me more"}]},
        ],
        max_tokens=50,
        temperature=0.5,
        stop=["END"],
    )
    validate("CreateChatCompletionResponse", raw.http_response.json())
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    assert raw.headers["x-gateway-provider"] == "up-anthropic"
    sent = fresh_upstream.requests()[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "upstream-secret-anthropic"
    assert "anthropic-version" in sent["headers"]
    body = sent["body"]
    assert body["model"] == "claude-test"
    assert body["system"] == [{"type": "text", "text": "You are terse."}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["max_tokens"] == 50
    assert body["stop_sequences"] == ["END"]
    assert body["temperature"] == 0.5


def test_tool_calls_round_trip(stack: Stack, team_a: Team, fresh_upstream) -> None:
    client = stack.client(team_a.key)
    first = client.chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    json.loads(call.function.arguments)
    sent = fresh_upstream.requests()[-1]["body"]
    assert sent["tools"][0]["input_schema"]["required"] == ["city"]
    assert sent["tool_choice"] == {"type": "tool", "name": "get_weather"}

    second = client.chat.completions.create(
        model="claude",
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21C"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert second.choices[0].message.content
    messages = fresh_upstream.requests()[-1]["body"]["messages"]
    assert messages[1]["content"][0]["type"] == "tool_use"
    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "Sunny, 21C",
    }


def test_streaming_translation(stack: Stack, team_a: Team, fresh_upstream) -> None:
    chunks = list(
        stack.client(team_a.key).chat.completions.create(
            model="claude",
            messages=[{"role": "user", "content": "Stream to me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.model_dump(exclude_unset=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens > 0
    assert fresh_upstream.requests()[-1]["body"]["stream"] is True
