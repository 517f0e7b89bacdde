"""A Messages request at an Anthropic-kind provider: passed through, with Anthropic's cache rules
checked first, the alias and the cost put on the reply, and the usage read from it."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import anthropic.types
import pytest

from gateway.dialects.messages.errors import error_event
from gateway.dialects.messages.native import NativeMessagesAdapter
from gateway.errors import (
    InvalidRequest,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)
from gateway.settings import ProviderKind
from tests.unit.dialects.messages.calls import (
    ALIAS,
    UPSTREAM_MODEL,
    cost,
    event_payloads,
    messages_body,
    messages_call,
    sse_events,
    validate_events,
)
from tests.unit.providers.calls import SECRET, provider

ADAPTER = NativeMessagesAdapter()
BASE = "https://api.anthropic.com"
PROVIDER = provider(
    ProviderKind.ANTHROPIC, base_url=BASE, anthropic_version="2023-06-01", headers={"x-extra": "1"}
)
EPHEMERAL = {"type": "ephemeral"}


def test_the_body_is_forwarded_as_sent_with_the_upstream_model() -> None:
    body = messages_body(
        system=[{"type": "text", "text": "Handbook", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        messages=[
            {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}
        ],
        thinking={"type": "enabled", "budget_tokens": 2048},
        tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
        some_future_field={"kept": True},
    )
    request = ADAPTER.build_request(messages_call(body), PROVIDER, BASE + "/")
    assert request.url == f"{BASE}/v1/messages"
    assert request.headers == {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        "x-api-key": SECRET,
        "x-extra": "1",
    }
    assert json.loads(request.content) == {**body, "model": UPSTREAM_MODEL}


def _block(ttl: str | None = None) -> dict[str, Any]:
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"type": "text", "text": "x", "cache_control": control}


@pytest.mark.parametrize(
    ("fields", "message", "param"),
    [
        ({"system": [_block() for _ in range(5)]}, "5 cache_control breakpoints", None),
        (
            {
                "tools": [{"name": "t", "input_schema": {}, "cache_control": EPHEMERAL}] * 3,
                "system": [_block(), _block()],
            },
            "5 cache_control breakpoints",
            None,
        ),
        ({"system": [_block("5m"), _block("1h")]}, "ttl '1h' comes after", None),
        (
            {"system": [_block() for _ in range(4)], "cache_control": EPHEMERAL},
            "5 cache_control breakpoints",
            None,
        ),
        (
            {"system": [_block("5m")], "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            "ttl '1h' comes after",
            None,
        ),
        ({"cache_control": {"type": "ephemeral", "ttl": "1d"}}, "ttl must be", "cache_control"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}
                        ],
                    }
                ]
            },
            "ttl must be",
            "messages[0].content[0].cache_control",
        ),
        (
            {"system": [{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]},
            "type must be",
            "system[0].cache_control",
        ),
    ],
)
def test_layouts_anthropic_refuses_are_a_400(fields: dict[str, Any], message: str, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as refused:
        ADAPTER.build_request(messages_call(messages_body(**fields)), PROVIDER, BASE)
    assert (refused.value.status, refused.value.code, refused.value.param) == (
        400,
        "invalid_cache_control",
        param,
    )
    assert message in refused.value.message


def test_four_breakpoints_longest_first_are_forwarded() -> None:
    tool = {"name": "t", "input_schema": {}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [_block("5m")],
        "cache_control": EPHEMERAL,
    }
    body = messages_body(
        tools=[tool],
        system=[_block("1h")],
        messages=[{"role": "user", "content": [result, {"type": "text", "text": "q"}]}],
    )
    assert json.loads(ADAPTER.build_request(messages_call(body), PROVIDER, BASE).content)["tools"] == [tool]


def message(usage: Any = None, **fields: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": UPSTREAM_MODEL,
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        **fields,
    }
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def test_the_reply_names_the_alias_and_carries_its_cost() -> None:
    usage = {
        "input_tokens": 20,
        "output_tokens": 7,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 30,
    }
    response = ADAPTER.parse_response(messages_call(messages_body()), message(usage))
    decoded = json.loads(response.body)
    anthropic.types.Message.model_validate(decoded, strict=True)
    assert decoded["model"] == ALIAS
    assert {k: v for k, v in decoded["usage"].items() if k != "cost"} == usage  # Anthropic's own counts
    assert Decimal(decoded["usage"]["cost"]) == cost(1050, 7, cached=1000, written=30)
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (1050, 7)
    assert (response.usage.cached_tokens, response.usage.cache_write_tokens) == (1000, 30)


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -3, "output_tokens": 7},
        {"input_tokens": 3, "output_tokens": 10**10},
        {"input_tokens": 3, "output_tokens": 7.5},
        {"input_tokens": "3", "output_tokens": 7},
    ],
)
def test_counts_that_cannot_be_true_are_not_believed_nor_priced(usage: dict[str, Any]) -> None:
    response = ADAPTER.parse_response(messages_call(messages_body()), message(usage))
    assert response.usage is None and response.untrusted_usage
    decoded = json.loads(response.body)
    assert decoded["usage"] == usage and decoded["model"] == ALIAS  # served as it came, unpriced


def test_a_reply_without_usage_is_served_unmetered() -> None:
    response = ADAPTER.parse_response(messages_call(messages_body()), message())
    assert (response.usage, response.untrusted_usage) == (None, None)


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"type": "error", "error": {"type": "api_error", "message": "boom"}}', b"[1, 2]"],
)
def test_unreadable_or_error_bodies_are_upstream_errors(body: bytes) -> None:
    with pytest.raises(UpstreamError):
        ADAPTER.parse_response(messages_call(messages_body()), body)


def test_upstream_errors_keep_anthropics_message() -> None:
    body = b'{"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too big"}}'
    rejected = ADAPTER.classify_error(400, body, {})
    assert isinstance(rejected, UpstreamRejected) and "max_tokens: too big" in rejected.message
    assert isinstance(ADAPTER.classify_error(429, b"{}", {"retry-after": "1"}), UpstreamRateLimited)
    assert isinstance(ADAPTER.classify_error(529, b"{}", {}), UpstreamUnavailable)


# --- streams -----------------------------------------------------------------------------------


def upstream_events(usage_at_start: Any, usage_at_end: Any) -> list[dict[str, Any]]:
    started = json.loads(message(usage_at_start, content=[], stop_reason=None))
    return [
        {"type": "message_start", "message": started},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": usage_at_end,
        },
        {"type": "message_stop"},
    ]


START = {
    "input_tokens": 12,
    "output_tokens": 1,
    "cache_read_input_tokens": 400,
    "cache_creation_input_tokens": 0,
}


def relay(events: list[dict[str, Any]], finish: bool = True) -> tuple[list[bytes], Any]:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    frames: list[bytes] = []
    for event in events:
        frames += translator.feed(json.dumps(event).encode())
    if finish:
        frames += translator.finish()
    return frames, translator


def test_stream_events_pass_through_with_event_lines_the_alias_and_the_cost() -> None:
    events = upstream_events(START, {"output_tokens": 25})
    frames, translator = relay(events)
    payloads = event_payloads(frames)
    validate_events(payloads)
    assert [p["type"] for p in payloads] == [e["type"] for e in events]
    assert payloads[0]["message"]["model"] == ALIAS
    assert payloads[1:5] == events[1:5]  # verbatim
    assert translator.usage is not None
    assert (translator.usage.prompt_tokens, translator.usage.completion_tokens) == (412, 25)
    assert translator.usage.cached_tokens == 400
    assert Decimal(payloads[5]["usage"]["cost"]) == cost(412, 25, cached=400)
    assert payloads[5]["usage"]["output_tokens"] == 25


def test_a_stream_without_usage_reports_none_rather_than_zero_counts() -> None:
    """Zero counts would be billed as the upstream's: none lets the gateway estimate them."""
    events = upstream_events(None, None)
    del events[5]["usage"]
    _, translator = relay(events)
    assert (translator.usage, translator.untrusted_usage) == (None, None)


def test_a_later_count_replaces_the_start_one() -> None:
    _, translator = relay(upstream_events(START, {"output_tokens": 25, "input_tokens": 30}))
    assert translator.usage.prompt_tokens == 430


@pytest.mark.parametrize(
    "bad_end", [{"output_tokens": -1}, {"output_tokens": 2**40}, {"output_tokens": "25"}]
)
def test_stream_counts_that_cannot_be_true(bad_end: dict[str, Any]) -> None:
    frames, translator = relay(upstream_events(START, bad_end))
    assert translator.usage is None and translator.untrusted_usage
    assert "cost" not in event_payloads(frames)[5]["usage"]


def test_an_error_event_raises() -> None:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    translator.feed(json.dumps(upstream_events(START, {})[0]).encode())
    with pytest.raises(UpstreamUnavailable):
        translator.feed(b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}')


@pytest.mark.parametrize("event", [b"not json", b"{}", b'{"type": "evil\\ndata: {}"}'])
def test_an_unreadable_event_is_an_upstream_error(event: bytes) -> None:
    translator = ADAPTER.stream_translator(messages_call(messages_body(stream=True)))
    with pytest.raises(UpstreamError):
        translator.feed(event)


def test_a_stream_cut_before_its_message_delta_is_an_error() -> None:
    _, translator = relay(upstream_events(START, {})[:4], finish=False)
    with pytest.raises(UpstreamError):
        translator.finish()


def test_a_stream_cut_after_its_message_delta_is_completed() -> None:
    frames, _ = relay(upstream_events(START, {"output_tokens": 3})[:6])
    assert [event.event for event in sse_events(b"".join(frames))][-1] == "message_stop"


def test_a_failure_after_the_first_byte_reaches_the_sdk_as_an_error_event() -> None:
    frames, _ = relay(upstream_events(START, {})[:3], finish=False)
    relayed = b"".join(frames) + error_event(UpstreamError("cut"))
    assert [event.event for event in sse_events(relayed)] == [
        "message_start",
        "content_block_start",
        "ping",
        "error",
    ]
    whole, _ = relay(upstream_events(START, {"output_tokens": 3}))
    assert "error" not in [event.event for event in sse_events(b"".join(whole))]
