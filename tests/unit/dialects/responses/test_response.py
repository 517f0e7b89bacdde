"""Chat completions (and Anthropic messages) turned into Response objects: golden fixtures, the
alias and exact cost, and upstreams whose counts cannot be true."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from openai.types.responses import Response as SDKResponse

from gateway.dialects.responses.adapter import TranslatedResponsesAdapter
from gateway.errors import UpstreamError
from gateway.metering.pricing import Tariff
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import Endpoint, TokenUsage, UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import Price
from tests.support.openapi import validate
from tests.unit.providers.calls import fixture_cases

TARIFF = Tariff(Price(input=Decimal("0.50"), output=Decimal("1.50"), cached_input=Decimal("0.25")))
CLAUDE_TARIFF = Tariff(
    Price(input=Decimal(3), output=Decimal(15), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"))
)


def counting_ids() -> Callable[[str], str]:
    numbers = itertools.count(1)
    return lambda prefix: f"{prefix}{next(numbers)}"


def adapter(chat: Any = None) -> TranslatedResponsesAdapter:
    return TranslatedResponsesAdapter(
        chat or OpenAIAdapter(), clock=lambda: 1700000999.0, new_id=counting_ids()
    )


def responses_call(body: dict[str, Any], tariff: Tariff | None = TARIFF) -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.RESPONSES,
        body=body,
        upstream_model="upstream-model",
        stream=False,
        client_wants_usage=False,
        team_id="team-1",
        tariff=tariff,
    )


def chat_completion(message: dict[str, Any], usage: Any = None, finish: str = "stop") -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "upstream-model",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/from_chat"))
def test_chat_completions_become_responses(name: str, case: dict[str, Any]) -> None:
    answer = adapter().parse_response(responses_call(case["request"]), json.dumps(case["chat"]).encode())
    assert json.loads(answer.body) == case["response"], name


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/from_chat"))
def test_the_responses_are_valid_for_openai_and_its_sdk(name: str, case: dict[str, Any]) -> None:
    validate("Response", case["response"])
    parsed = SDKResponse.model_validate(case["response"])
    assert parsed.model == "alias"
    assert parsed.output_text == "".join(
        part.get("text", "")
        for item in case["response"]["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def test_the_usage_is_metered_and_priced_exactly() -> None:
    usage = {"prompt_tokens": 1_000, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 999}}
    answer = adapter().parse_response(
        responses_call({"model": "alias", "input": "x"}), chat_completion({"content": "y"}, usage)
    )
    assert answer.usage == TokenUsage(prompt_tokens=1_000, completion_tokens=7, cached_tokens=999)
    body = json.loads(answer.body)
    assert body["usage"]["cost"] == format(TARIFF.cost(answer.usage), "f") == "0.00026075"
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 999, "cache_write_tokens": 0}


def test_without_a_tariff_there_is_no_cost() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    answer = adapter().parse_response(
        responses_call({"model": "alias", "input": "x"}, tariff=None),
        chat_completion({"content": "y"}, usage),
    )
    assert "cost" not in json.loads(answer.body)["usage"]


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -5, "completion_tokens": 2},
        {"prompt_tokens": 10, "completion_tokens": 10**15},
        {"prompt_tokens": "10", "completion_tokens": 2},
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 11}},
    ],
)
def test_counts_that_cannot_be_true_are_not_believed_nor_shown(usage: dict[str, Any]) -> None:
    answer = adapter().parse_response(
        responses_call({"model": "alias", "input": "x"}), chat_completion({"content": "y"}, usage)
    )
    assert answer.usage is None
    assert answer.untrusted_usage
    body = json.loads(answer.body)
    assert "usage" not in body
    assert body["output"][0]["content"][0]["text"] == "y"  # the answer itself is served
    validate("Response", body)


def test_an_answer_without_usage_is_served_unmetered() -> None:
    answer = adapter().parse_response(
        responses_call({"model": "alias", "input": "x"}), chat_completion({"content": "y"})
    )
    assert (answer.usage, answer.untrusted_usage) == (None, None)
    assert "usage" not in json.loads(answer.body)


@pytest.mark.parametrize(
    "body",
    [b"<html>502</html>", b"[]", json.dumps({"id": "x", "choices": []}).encode()],
)
def test_what_is_not_a_chat_completion_is_an_upstream_error(body: bytes) -> None:
    with pytest.raises(UpstreamError):
        adapter().parse_response(responses_call({"model": "alias", "input": "x"}), body)


def test_an_anthropic_message_becomes_a_response_with_cache_counts() -> None:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Looking it up."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 20,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200,
        },
    }
    call = responses_call({"model": "claude", "input": "Weather?"}, tariff=CLAUDE_TARIFF)
    answer = adapter(AnthropicAdapter()).parse_response(call, json.dumps(message).encode())
    assert answer.usage == TokenUsage(
        prompt_tokens=1210, completion_tokens=20, cached_tokens=1000, cache_write_tokens=200
    )
    body = json.loads(answer.body)
    validate("Response", body)
    assert body["model"] == "claude"
    assert [item["type"] for item in body["output"]] == ["message", "function_call"]
    assert body["output"][1]["call_id"] == "toolu_1"
    assert json.loads(body["output"][1]["arguments"]) == {"city": "Oslo"}
    assert body["usage"]["input_tokens"] == 1210
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 1000, "cache_write_tokens": 200}
    # 10 x 3 + 1000 x 0.30 + 200 x 3.75 + 20 x 15 = 1380 USD a million tokens, to the prices' scale
    assert body["usage"]["cost"] == format(CLAUDE_TARIFF.cost(answer.usage), "f") == "0.00138000"


def test_anthropic_counts_that_cannot_be_true_are_not_believed() -> None:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": -1, "output_tokens": 20},
    }
    answer = adapter(AnthropicAdapter()).parse_response(
        responses_call({"model": "claude", "input": "x"}), json.dumps(message).encode()
    )
    assert answer.usage is None
    assert "input_tokens" in (answer.untrusted_usage or "")
    assert "usage" not in json.loads(answer.body)
