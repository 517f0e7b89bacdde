"""A chat completion stream retold as Anthropic's Messages event stream (translated providers).

The events are read back with the anthropic SDK's own SSE decoder and checked against its event
types; an in-band error after the first byte reaches that decoder as an `error` event.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from gateway.dialects.messages.adapter import TranslatedMessagesAdapter
from gateway.dialects.messages.errors import error_event
from gateway.errors import GatewayError, UpstreamError
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import ProviderKind
from tests.unit.dialects.messages.calls import (
    ALIAS,
    cost,
    event_payloads,
    messages_body,
    messages_call,
    sse_events,
    validate_events,
)
from tests.unit.providers.calls import provider

ADAPTER = TranslatedMessagesAdapter(OpenAIAdapter(), provider(ProviderKind.OPENAI))


def chunk(
    delta: dict[str, Any] | None = None, finish_reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason, **extra}]
    return {
        "id": "chatcmpl-s1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": choices,
    }


def usage_chunk(prompt: Any, completion: Any, cached: Any = 0) -> dict[str, Any]:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return {**chunk(), "usage": usage}


TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " world"}),
    chunk({}, "stop"),
    usage_chunk(120, 2, cached=100),
]


def run(
    chunks: list[Any], body: dict[str, Any] | None = None, *, done: bool = True
) -> tuple[list[bytes], Any]:
    translator = ADAPTER.stream_translator(messages_call(body or messages_body(stream=True)))
    frames: list[bytes] = []
    for item in chunks:
        frames += translator.feed(json.dumps(item).encode())
    if done:
        frames += translator.feed(b"[DONE]")
    frames += translator.finish()
    return frames, translator


def test_a_text_stream() -> None:
    frames, translator = run(TEXT_STREAM)
    events = event_payloads(frames)
    validate_events(events)
    assert [event["type"] for event in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    started = events[0]["message"]
    assert (started["id"], started["model"], started["content"]) == ("msg_s1", ALIAS, [])
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == ["Hello", " world"]
    delta = events[-2]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert {k: v for k, v in delta["usage"].items() if k != "cost"} == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100,
        "output_tokens": 2,
    }
    assert Decimal(delta["usage"]["cost"]) == cost(120, 2, cached=100)
    assert translator.usage.prompt_tokens == 120 and translator.usage.cached_tokens == 100


def test_tool_calls_stream_as_tool_use_blocks() -> None:
    first = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "weather", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "time", "arguments": "{}"}}
    frames, _ = run(
        [
            chunk({"role": "assistant", "content": "Let me check."}),
            chunk({"tool_calls": [first]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({"tool_calls": [second]}),
            chunk({}, "tool_calls"),
            usage_chunk(50, 20),
        ]
    )
    events = event_payloads(frames)
    validate_events(events)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(e["index"], e["content_block"]) for e in starts] == [
        (0, {"type": "text", "text": ""}),
        (1, {"type": "tool_use", "id": "call_a", "name": "weather", "input": {}}),
        (2, {"type": "tool_use", "id": "call_b", "name": "time", "input": {}}),
    ]
    partial = [
        e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1
    ]
    assert json.loads("".join(partial)) == {"city": "Paris"}
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1, 2]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


def test_a_stop_sequence_and_a_length_stop() -> None:
    body = messages_body(stream=True, stop_sequences=["END"])
    frames, _ = run([chunk({"content": "a"}), chunk({}, "stop", stop_reason="END")], body)
    assert event_payloads(frames)[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    frames, _ = run([chunk({"content": "a"}), chunk({}, "length")])
    assert event_payloads(frames)[-2]["delta"]["stop_reason"] == "max_tokens"


def test_a_stream_without_usage_reports_zero_counts_and_no_cost() -> None:
    frames, translator = run(TEXT_STREAM[:-1])
    usage = event_payloads(frames)[-2]["usage"]
    assert usage == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    assert translator.usage is None


@pytest.mark.parametrize(
    "bad", [usage_chunk(-1, 2), usage_chunk(10**13, 2), usage_chunk(10, "2"), usage_chunk(10, 2, cached=50)]
)
def test_counts_that_cannot_be_true_are_not_believed(bad: dict[str, Any]) -> None:
    frames, translator = run([*TEXT_STREAM[:-1], bad])
    assert translator.usage is None and translator.untrusted_usage
    assert "cost" not in event_payloads(frames)[-2]["usage"]


def test_an_upstream_that_ends_without_done_still_completes_after_its_finish() -> None:
    frames, _ = run(TEXT_STREAM, done=False)
    assert event_payloads(frames)[-1]["type"] == "message_stop"


def test_an_upstream_that_ends_mid_message_is_an_error() -> None:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    translator.feed(json.dumps(chunk({"content": "Hel"})).encode())
    with pytest.raises(UpstreamError):
        translator.finish()


def test_an_error_chunk_raises() -> None:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    with pytest.raises(UpstreamError):
        translator.feed(b'{"error": {"message": "overloaded"}}')


def test_the_gateways_in_band_error_reaches_the_sdk_as_an_error_event() -> None:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    frames = translator.feed(json.dumps(chunk({"content": "Hel"})).encode())
    error = GatewayError("the upstream closed the connection")
    relayed = b"".join(frames) + error_event(error)  # what gateway.proxy.relay sends on this API
    events = sse_events(relayed)
    assert events[-1].event == "error"
    assert json.loads(events[-1].data) == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": "the upstream closed the connection",
            "param": None,
            "code": None,
        },
    }
    assert [e.event for e in events[:-1]] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
    ]


def test_every_event_line_belongs_to_its_own_data() -> None:
    frames, _ = run(TEXT_STREAM)
    for frame in frames:
        event, data, end = frame.split(b"\n", 2)
        assert event == b"event: " + json.loads(data.removeprefix(b"data: "))["type"].encode()
        assert end == b"\n"


def test_a_whole_stream_ends_clean() -> None:
    frames, _ = run(TEXT_STREAM)
    assert b"".join(frames).endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert "error" not in [event.event for event in sse_events(b"".join(frames))]
