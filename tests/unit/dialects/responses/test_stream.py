"""Chat completion streams (and Anthropic's) turned into the Responses event sequence: golden
fixtures, events OpenAI's document and SDK accept, usage and streams that end badly."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from typing import Any

import pytest
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.dialects.responses.adapter import TranslatedResponsesAdapter
from gateway.errors import UpstreamError
from gateway.metering.pricing import Tariff
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import Endpoint, StreamTranslator, TokenUsage, UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import Price
from tests.support.openapi import validate
from tests.unit.providers.calls import fixture_cases

TARIFF = Tariff(Price(input=Decimal("0.50"), output=Decimal("1.50"), cached_input=Decimal("0.25")))
SDK_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def translator(body: dict[str, Any], chat: Any = None) -> StreamTranslator:
    numbers = itertools.count(1)
    adapter = TranslatedResponsesAdapter(
        chat or OpenAIAdapter(), clock=lambda: 1700000999.0, new_id=lambda prefix: f"{prefix}{next(numbers)}"
    )
    call = UpstreamCall(
        endpoint=Endpoint.RESPONSES,
        body=body,
        upstream_model="upstream-model",
        stream=True,
        client_wants_usage=False,
        team_id="team-1",
        tariff=TARIFF,
    )
    return adapter.stream_translator(call)


def events_of(frames: list[bytes]) -> list[dict[str, Any]]:
    """Each frame's event, checked to be `event: <type>\\ndata: <json>\\n\\n`."""
    events = []
    for frame in frames:
        head, _, rest = frame.partition(b"\n")
        assert rest.startswith(b"data: ") and rest.endswith(b"\n\n"), frame
        event = json.loads(rest[len(b"data: ") : -2])
        assert head == b"event: " + event["type"].encode()
        events.append(event)
    return events


def run(
    body: dict[str, Any], payloads: list[Any], chat: Any = None
) -> tuple[StreamTranslator, list[dict[str, Any]]]:
    stream = translator(body, chat)
    frames: list[bytes] = []
    for payload in payloads:
        frames += stream.feed(payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
    frames += stream.finish()
    return stream, events_of(frames)


def sdk_final_response(events: list[dict[str, Any]]) -> Any:
    """What the openai SDK's stream helper makes of the events (it checks their order and ids)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for event in events:
        for handled in state.handle_event(SDK_EVENTS.validate_python(event)):
            if handled.type == "response.completed":
                final = handled.response
    return final


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/streams"))
def test_chat_streams_become_response_events(name: str, case: dict[str, Any]) -> None:
    _, events = run(case["request"], case["chunks"])
    assert events == case["events"], name


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/streams"))
def test_the_events_are_valid_for_openai_and_its_sdk(name: str, case: dict[str, Any]) -> None:
    events = case["events"]
    for event in events:
        validate("ResponseStreamEvent", event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    last = events[-1]["response"]
    if last["status"] == "completed":
        final = sdk_final_response(events)
        assert final is not None
        assert [(item.type, item.id) for item in final.output] == [
            (i["type"], i["id"]) for i in last["output"]
        ]
        texts = [
            part.get("text", "") for i in last["output"] if i["type"] == "message" for part in i["content"]
        ]
        assert final.output_text == "".join(texts)
    validate("Response", last)


def test_the_completed_event_carries_usage_and_its_exact_cost() -> None:
    case = dict(fixture_cases("dialects/responses/streams"))["text_with_usage"]
    stream, events = run(case["request"], case["chunks"])
    assert stream.usage == TokenUsage(prompt_tokens=40, completion_tokens=9, cached_tokens=32)
    usage = events[-1]["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (40, 9, 49)
    assert usage["input_tokens_details"]["cached_tokens"] == 32
    assert usage["cost"] == format(TARIFF.cost(stream.usage), "f")
    assert all(event["response"]["model"] == "alias" for event in events if "response" in event)


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "upstream-model",
        "choices": []
        if delta is None and finish is None
        else [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def test_a_stream_without_done_completes_once_its_finish_reason_came() -> None:
    stream, events = run({"model": "alias", "input": "x"}, [chunk({"content": "hi"}), chunk(finish="stop")])
    assert events[-1]["type"] == "response.completed"
    assert stream.finish() == []  # finished once


def test_a_stream_cut_before_its_finish_reason_is_an_upstream_error() -> None:
    stream = translator({"model": "alias", "input": "x"})
    assert stream.feed(json.dumps(chunk({"content": "hi"})).encode())  # created, in_progress, the delta
    with pytest.raises(UpstreamError, match="ended before the response was complete"):
        stream.finish()


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1, "completion_tokens": 2},
        {"prompt_tokens": 2, "completion_tokens": 2_000_000_000},
        {"prompt_tokens": 2, "completion_tokens": None, "prompt_tokens_details": {"cached_tokens": 3}},
    ],
)
def test_counts_that_cannot_be_true_are_not_believed_nor_shown(usage: dict[str, Any]) -> None:
    stream, events = run(
        {"model": "alias", "input": "x"},
        [chunk({"content": "hi"}), chunk(finish="stop"), chunk(usage=usage), "[DONE]"],
    )
    assert stream.usage is None
    assert stream.untrusted_usage
    assert "usage" not in events[-1]["response"]
    validate("ResponseStreamEvent", events[-1])


def anthropic_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


ANTHROPIC_STREAM = [
    anthropic_event(
        "message_start",
        message={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_read_input_tokens": 300,
                "cache_creation_input_tokens": 0,
            },
        },
    ),
    anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    anthropic_event("ping"),
    anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Let me look."}),
    anthropic_event("content_block_stop", index=0),
    anthropic_event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
    ),
    anthropic_event(
        "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"city":'}
    ),
    anthropic_event(
        "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '"Oslo"}'}
    ),
    anthropic_event("content_block_stop", index=1),
    anthropic_event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 25}),
    anthropic_event("message_stop"),
]


def test_an_anthropic_stream_becomes_response_events() -> None:
    stream, events = run(
        {"model": "claude", "input": "Weather?", "tools": []}, ANTHROPIC_STREAM, AnthropicAdapter()
    )
    for event in events:
        validate("ResponseStreamEvent", event)
    final = sdk_final_response(events)
    assert final is not None
    assert final.output_text == "Let me look."
    call = final.output[1]
    assert (call.type, call.call_id, call.name, json.loads(call.arguments)) == (
        "function_call",
        "toolu_1",
        "get_weather",
        {"city": "Oslo"},
    )
    assert stream.usage == TokenUsage(prompt_tokens=310, completion_tokens=25, cached_tokens=300)
    assert events[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 300


def test_an_anthropic_stream_cut_short_is_an_upstream_error() -> None:
    stream = translator({"model": "claude", "input": "x"}, AnthropicAdapter())
    for event in ANTHROPIC_STREAM[:4]:
        stream.feed(json.dumps(event).encode())
    with pytest.raises(UpstreamError):
        stream.finish()
