"""A Messages request served by an OpenAI-compatible provider: translated to chat and back.

Golden cases for the request (what the chat upstream receives) and the reply (the Message the
client gets, checked against the anthropic SDK's own type), bad input refused with its parameter,
and an upstream whose counts cannot be true.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import anthropic.types
import pytest

from gateway.dialects.endpoints import endpoint_adapter
from gateway.dialects.messages.adapter import TranslatedMessagesAdapter, messages_adapter
from gateway.dialects.messages.native import NativeMessagesAdapter
from gateway.errors import InvalidRequest, UpstreamError, UpstreamRateLimited, UpstreamRejected
from gateway.providers.base import Endpoint
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import ProviderKind
from tests.unit.dialects.messages.calls import ALIAS, UPSTREAM_MODEL, cost, messages_body, messages_call
from tests.unit.providers.calls import provider

SELF_HOSTED = provider(ProviderKind.OPENAI, base_url="http://vllm.internal:8000/v1")
PASSING = provider(ProviderKind.OPENAI, base_url="http://vllm.internal:8000/v1", cache_hints="pass")
HINTED = provider(ProviderKind.OPENAI, base_url="https://api.openai.com/v1")
ADAPTER = TranslatedMessagesAdapter(OpenAIAdapter(), PASSING)  # the translation exactly as it is
STRIPPING_ADAPTER = TranslatedMessagesAdapter(OpenAIAdapter(), SELF_HOSTED)
HINTED_ADAPTER = TranslatedMessagesAdapter(OpenAIAdapter(), HINTED)
EPHEMERAL = {"type": "ephemeral"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def sent(body: dict[str, Any], adapter: TranslatedMessagesAdapter = ADAPTER) -> dict[str, Any]:
    settings = adapter.provider
    request = adapter.build_request(messages_call(body), settings, settings.urls[0])
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


REQUEST_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "system string, sampling fields, dropped thinking and top_k",
        messages_body(
            system="Be terse.",
            temperature=0.2,
            top_p=0.9,
            top_k=40,
            stop_sequences=["END"],
            metadata={"user_id": "u-1"},
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        {
            "model": UPSTREAM_MODEL,
            "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello"}],
            "max_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": ["END"],
            "user": "u-1",
        },
    ),
    (
        "system and user blocks keep their cache hints as content parts",
        messages_body(
            system=[{"type": "text", "text": "Handbook", "cache_control": EPHEMERAL}],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                        {"type": "text", "text": "Question"},
                    ],
                }
            ],
        ),
        {
            "model": UPSTREAM_MODEL,
            "messages": [
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "Handbook", "cache_control": EPHEMERAL}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                        {"type": "text", "text": "Question"},
                    ],
                },
            ],
            "max_tokens": 256,
        },
    ),
    (
        "a tool round trip: tool_use to tool_calls, tool_result to a tool message ahead of the text",
        messages_body(
            tools=[
                {
                    "name": "weather",
                    "description": "Weather",
                    "input_schema": WEATHER,
                    "cache_control": EPHEMERAL,
                }
            ],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
            messages=[
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "look it up", "signature": "sig"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "Sunny"}],
                            "cache_control": EPHEMERAL,
                        },
                        {"type": "text", "text": "And tomorrow?"},
                    ],
                },
            ],
        ),
        {
            "model": UPSTREAM_MODEL,
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny", "cache_control": EPHEMERAL},
                {"role": "user", "content": "And tomorrow?"},
            ],
            "max_tokens": 256,
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "weather", "parameters": WEATHER, "description": "Weather"},
                    "cache_control": EPHEMERAL,
                }
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
        },
    ),
    (
        "automatic caching marks the last message; a json_schema output format is a response_format",
        messages_body(
            cache_control=EPHEMERAL,
            output_config={"effort": "high", "format": {"type": "json_schema", "schema": WEATHER}},
        ),
        {
            "model": UPSTREAM_MODEL,
            "messages": [{"role": "user", "content": "Hello", "cache_control": EPHEMERAL}],
            "max_tokens": 256,
            "response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": WEATHER}},
        },
    ),
    (
        "images as data and http URLs",
        messages_body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
                        {"type": "text", "text": "Compare"},
                    ],
                }
            ]
        ),
        {
            "model": UPSTREAM_MODEL,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                        {"type": "text", "text": "Compare"},
                    ],
                }
            ],
            "max_tokens": 256,
        },
    ),
]


@pytest.mark.parametrize(("name", "body", "expected"), REQUEST_CASES, ids=[case[0] for case in REQUEST_CASES])
def test_request_translation(name: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sent(body) == expected


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "weather"},
            {"tool_choice": {"type": "function", "function": {"name": "weather"}}},
        ),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            {"tool_choice": "required", "parallel_tool_calls": False},
        ),
    ],
)
def test_tool_choices(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    body = sent(messages_body(tools=[{"name": "weather", "input_schema": WEATHER}], tool_choice=choice))
    assert {key: body[key] for key in expected if key in body} == expected
    assert ("parallel_tool_calls" in body) == ("parallel_tool_calls" in expected)


def test_openai_api_gets_max_completion_tokens_and_a_derived_cache_key() -> None:
    body = sent(
        messages_body(system=[{"type": "text", "text": "Handbook", "cache_control": EPHEMERAL}]),
        HINTED_ADAPTER,
    )
    assert body["max_completion_tokens"] == 256
    assert "max_tokens" not in body
    assert "cache_control" not in json.dumps(body)  # turned into the key, as for chat (SPEC section 4)
    assert isinstance(body["prompt_cache_key"], str) and body["prompt_cache_key"]
    same = sent(
        messages_body(system=[{"type": "text", "text": "Handbook", "cache_control": EPHEMERAL}]),
        HINTED_ADAPTER,
    )
    assert same["prompt_cache_key"] == body["prompt_cache_key"]


def test_a_self_hosted_server_gets_no_hints_and_a_stream_asks_for_usage() -> None:
    hinted = messages_body(stream=True, system=[{"type": "text", "text": "H", "cache_control": EPHEMERAL}])
    body = sent(hinted, STRIPPING_ADAPTER)
    assert "cache_control" not in json.dumps(body) and "prompt_cache_key" not in body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_the_chat_url_and_which_adapter_serves_which_kind() -> None:
    request = ADAPTER.build_request(
        messages_call(messages_body()), SELF_HOSTED, "http://vllm.internal:8000/v1"
    )
    assert request.url == "http://vllm.internal:8000/v1/chat/completions"
    anthropic_kind = provider(ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com")
    assert isinstance(endpoint_adapter(anthropic_kind, Endpoint.MESSAGES), NativeMessagesAdapter)
    for kind in (ProviderKind.OPENAI, ProviderKind.AZURE, ProviderKind.MOCK):
        assert isinstance(messages_adapter(provider(kind), OpenAIAdapter()), TranslatedMessagesAdapter)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "text", "data": "x"}}],
                    }
                ]
            },
            "messages[0].content[0]",
            "unsupported_parameter",
        ),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools[0]",
            "unsupported_parameter",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source",
            "unsupported_parameter",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "w", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [
                                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
                                ],
                            }
                        ],
                    },
                ]
            },
            "messages[2].content[0].content[0]",
            "unsupported_parameter",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "w", "input": "x"}],
                    }
                ]
            },
            "messages[0].content[0].input",
            "invalid_request",
        ),
        (
            {"mcp_servers": [{"type": "url", "url": "https://mcp", "name": "m"}]},
            "mcp_servers",
            "unsupported_parameter",
        ),
        (
            {"tools": [{"name": "w", "input_schema": WEATHER}], "tool_choice": {"type": "tool"}},
            "tool_choice.name",
            "invalid_request",
        ),
        (
            {"system": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]},
            "system[0].type",
            "unsupported_parameter",
        ),
    ],
)
def test_what_chat_cannot_express_is_a_400_naming_the_parameter(
    fields: dict[str, Any], param: str, code: str | None
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        sent(messages_body(**fields))
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, code)
    assert param.split(".")[0].split("[")[0] in refused.value.message


# --- the reply ---------------------------------------------------------------------------------


def completion(
    message: dict[str, Any], finish_reason: str | None = "stop", usage: Any = None, **choice: Any
) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1,
        "model": UPSTREAM_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
                **choice,
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def reply(body: bytes, request: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    response = ADAPTER.parse_response(messages_call(request or messages_body()), body)
    decoded: dict[str, Any] = json.loads(response.body)
    anthropic.types.Message.model_validate(decoded, strict=True)
    return decoded, response


def test_a_text_answer_with_cached_tokens() -> None:
    usage = {"prompt_tokens": 1200, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1000}}
    decoded, response = reply(completion({"content": "Hi there"}, usage=usage))
    assert decoded == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": ALIAS,
        "content": [{"type": "text", "text": "Hi there"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 200,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1000,
            "output_tokens": 30,
            "cost": decoded["usage"]["cost"],
        },
    }
    assert Decimal(decoded["usage"]["cost"]) == cost(1200, 30, cached=1000)
    assert (response.usage.prompt_tokens, response.usage.cached_tokens) == (1200, 1000)


def test_tool_calls_become_tool_use_blocks() -> None:
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
        },
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "not json"}},
    ]
    decoded, _ = reply(completion({"content": None, "tool_calls": calls}, "tool_calls"))
    assert decoded["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "weather", "input": {}},
    ]
    assert decoded["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("finish_reason", "extra", "message", "expected"),
    [
        ("length", {}, {"content": "cut"}, ("max_tokens", None)),
        ("stop", {"stop_reason": "END"}, {"content": "x"}, ("stop_sequence", "END")),
        ("stop", {"stop_reason": "OTHER"}, {"content": "x"}, ("end_turn", None)),
        ("content_filter", {}, {"content": ""}, ("refusal", None)),
        ("stop", {}, {"content": None, "refusal": "I can't help with that"}, ("refusal", None)),
        (None, {}, {"content": "x"}, ("end_turn", None)),
    ],
)
def test_stop_reasons(
    finish_reason: str | None, extra: dict[str, Any], message: dict[str, Any], expected: Any
) -> None:
    decoded, _ = reply(completion(message, finish_reason, **extra), messages_body(stop_sequences=["END"]))
    assert (decoded["stop_reason"], decoded["stop_sequence"]) == expected


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -5, "completion_tokens": 3},
        {"prompt_tokens": 10**12, "completion_tokens": 3},
        {"prompt_tokens": "12", "completion_tokens": 3},
        {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 11}},
    ],
)
def test_counts_that_cannot_be_true_are_not_believed(usage: dict[str, Any]) -> None:
    decoded, response = reply(completion({"content": "x"}, usage=usage))
    assert response.usage is None and response.untrusted_usage
    assert decoded["usage"] == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }  # no cost: there is nothing believable to price


def test_an_answer_without_usage_has_zero_counts_and_no_cost() -> None:
    decoded, response = reply(completion({"content": "x"}))
    assert response.usage is None and response.untrusted_usage is None
    assert "cost" not in decoded["usage"]


def test_without_a_price_the_usage_has_no_cost() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 3}
    response = ADAPTER.parse_response(
        messages_call(messages_body(), tariff=None), completion({"content": "x"}, usage=usage)
    )
    assert "cost" not in json.loads(response.body)["usage"]


@pytest.mark.parametrize(
    "body",
    [b"<html>oops</html>", b'{"error": {"message": "boom"}}', b'{"id": "x", "choices": []}'],
)
def test_unreadable_answers_are_upstream_errors(body: bytes) -> None:
    with pytest.raises(UpstreamError):
        ADAPTER.parse_response(messages_call(messages_body()), body)


def test_upstream_errors_are_classified_as_for_chat() -> None:
    limited = ADAPTER.classify_error(429, b'{"error": {"message": "slow down"}}', {"retry-after": "2"})
    assert isinstance(limited, UpstreamRateLimited) and limited.retry_after_s == 2
    body = (
        b'{"error": {"message": "bad stop", "type": "invalid_request_error", "param": "stop", "code": "x"}}'
    )
    rejected = ADAPTER.classify_error(400, body, {})
    assert isinstance(rejected, UpstreamRejected) and (rejected.status, rejected.param) == (400, "stop")
