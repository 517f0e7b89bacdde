"""Reported token counts are believed only when they can be true: ints in [0, MAX_TOKENS], cache
reads and writes within the prompt. Otherwise the answer is served and its usage is not trusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import TokenUsage
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.usage_bounds import MAX_TOKENS, UntrustedUsage, bounded, reported_count
from tests.unit.providers.calls import call

CHAT = {"model": "a", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
}
UNTRUSTED_OPENAI: list[dict[str, Any]] = [
    {"prompt_tokens": 3_000_000_000, "completion_tokens": 1},
    {"prompt_tokens": -5, "completion_tokens": 1},
    {"prompt_tokens": 5, "completion_tokens": -1},
    {"prompt_tokens": 10**30, "completion_tokens": 1},
    {"prompt_tokens": 5.5, "completion_tokens": 1},
    {"prompt_tokens": "5", "completion_tokens": 1},
    {"prompt_tokens": True, "completion_tokens": 1},
    {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 6}},
    {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": -1}},
]
UNTRUSTED_ANTHROPIC: list[dict[str, Any]] = [
    {"input_tokens": 3_000_000_000, "output_tokens": 1},
    {"input_tokens": -5, "output_tokens": 1},
    {"input_tokens": 5, "output_tokens": 2**40},
    {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": -3},
    {"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": "9"},
    # each part within the bound, their sum (the OpenAI-terms prompt) past it
    {"input_tokens": MAX_TOKENS, "output_tokens": 1, "cache_read_input_tokens": MAX_TOKENS},
]


def test_the_bound_itself_is_believed() -> None:
    assert reported_count(MAX_TOKENS, "prompt_tokens") == MAX_TOKENS
    assert reported_count(None, "prompt_tokens") == 0
    usage = TokenUsage(prompt_tokens=MAX_TOKENS, completion_tokens=MAX_TOKENS, cached_tokens=MAX_TOKENS)
    assert bounded(usage) == usage


def test_the_reason_names_the_field_and_never_a_text_value() -> None:
    with pytest.raises(UntrustedUsage, match=r"prompt_tokens = -5 is outside"):
        reported_count(-5, "prompt_tokens")
    with pytest.raises(UntrustedUsage) as caught:
        reported_count("the user's secret prompt", "prompt_tokens")
    assert "secret" not in str(caught.value)
    assert str(caught.value) == "prompt_tokens is a str, not a token count"


@pytest.mark.parametrize("usage", UNTRUSTED_OPENAI)
def test_an_openai_answer_with_untrue_counts_is_served_without_usage(usage: dict[str, Any]) -> None:
    body = json.dumps({**COMPLETION, "usage": usage}).encode()
    response = OpenAIAdapter().parse_response(call(CHAT), body)
    assert response.usage is None
    assert response.untrusted_usage is not None
    assert json.loads(response.body)["choices"] == COMPLETION["choices"]  # the answer, as it came


@pytest.mark.parametrize("usage", UNTRUSTED_OPENAI)
def test_an_openai_stream_with_untrue_counts_keeps_no_usage(usage: dict[str, Any]) -> None:
    translator = OpenAIAdapter().stream_translator(call({**CHAT, "stream": True}, client_wants_usage=True))
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    frames = translator.feed(json.dumps({**chunk, "usage": usage}).encode())
    assert frames  # relayed as it came
    assert translator.usage is None and translator.untrusted_usage is not None


def test_a_later_true_report_replaces_an_untrue_one() -> None:
    translator = OpenAIAdapter().stream_translator(call({**CHAT, "stream": True}))
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    translator.feed(json.dumps({**chunk, "usage": {"prompt_tokens": -1}}).encode())
    translator.feed(json.dumps({**chunk, "usage": {"prompt_tokens": 4, "completion_tokens": 2}}).encode())
    assert translator.usage == TokenUsage(prompt_tokens=4, completion_tokens=2)
    assert translator.untrusted_usage is None


def anthropic_message(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "model": "claude",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": usage,
    }


@pytest.mark.parametrize("usage", UNTRUSTED_ANTHROPIC)
def test_an_anthropic_answer_with_untrue_counts_is_served_without_usage(usage: dict[str, Any]) -> None:
    adapter = AnthropicAdapter(clock=lambda: 1.0)
    response = adapter.parse_response(call(CHAT), json.dumps(anthropic_message(usage)).encode())
    assert response.usage is None
    assert response.untrusted_usage is not None
    body = json.loads(response.body)
    assert body["choices"][0]["message"]["content"] == "ok"
    assert "usage" not in body


@pytest.mark.parametrize("usage", UNTRUSTED_ANTHROPIC)
def test_an_anthropic_stream_with_untrue_final_counts_keeps_no_usage(usage: dict[str, Any]) -> None:
    adapter = AnthropicAdapter(clock=lambda: 1.0)
    translator = adapter.stream_translator(call({**CHAT, "stream": True}))
    start = {**anthropic_message({"input_tokens": 5, "output_tokens": 1}), "content": []}
    translator.feed(json.dumps({"type": "message_start", "message": start}).encode())
    assert translator.usage == TokenUsage(prompt_tokens=5, completion_tokens=1)
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}
    translator.feed(json.dumps(delta).encode())
    assert translator.usage is None and translator.untrusted_usage is not None
