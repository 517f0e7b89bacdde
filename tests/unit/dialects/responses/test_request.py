"""Responses API requests translated to chat (and on to Anthropic), against golden fixtures; what
is refused, with the parameter named; and the typed parse of a /v1/responses body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

from gateway.dialects.responses.adapter import TranslatedResponsesAdapter
from gateway.errors import InvalidRequest
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.proxy.request import parse_request
from gateway.settings import ProviderKind
from tests.unit.providers.calls import fixture_cases, provider

SELF_HOSTED = "http://vllm.internal:8000/v1"
VLLM = provider(base_url=SELF_HOSTED)
CLAUDE = provider(ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com")
TO_CHAT = TranslatedResponsesAdapter(OpenAIAdapter())
TO_ANTHROPIC = TranslatedResponsesAdapter(AnthropicAdapter())
CHAT_PARAMS = TypeAdapter(CompletionCreateParamsNonStreaming)
RESPONSES_PARAMS = TypeAdapter(ResponseCreateParamsNonStreaming)


def responses_call(body: dict[str, Any], cache_key: str | None = None) -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.RESPONSES,
        body=body,
        upstream_model="upstream-model",
        stream=bool(body.get("stream")),
        client_wants_usage=False,
        team_id="team-1",
        cache_key=cache_key,
    )


def sent(adapter: TranslatedResponsesAdapter, body: dict[str, Any], **settings: Any) -> dict[str, Any]:
    target = provider(base_url=SELF_HOSTED, **settings) if adapter is TO_CHAT else CLAUDE
    base = SELF_HOSTED if adapter is TO_CHAT else "https://api.anthropic.com"
    request = adapter.build_request(responses_call(body), target, base)
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/requests"))
def test_requests_translate_to_chat(name: str, case: dict[str, Any]) -> None:
    assert sent(TO_CHAT, case["responses"]) == case["chat"], name


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/requests"))
def test_the_fixtures_are_requests_the_sdk_would_send_and_accept(name: str, case: dict[str, Any]) -> None:
    RESPONSES_PARAMS.validate_python({k: v for k, v in case["responses"].items() if k not in ("stream",)})
    chat = {
        k: v for k, v in case["chat"].items() if k not in ("stream", "stream_options", "reasoning_effort")
    }
    CHAT_PARAMS.validate_python(chat)


@pytest.mark.parametrize(
    ("name", "case"), [(n, c) for n, c in fixture_cases("dialects/responses/requests") if "anthropic" in c]
)
def test_requests_translate_on_to_anthropic(name: str, case: dict[str, Any]) -> None:
    assert sent(TO_ANTHROPIC, case["responses"]) == case["anthropic"], name


def test_the_chat_request_goes_to_the_chat_endpoint_with_the_providers_auth() -> None:
    request = TO_CHAT.build_request(responses_call({"model": "a", "input": "x"}), VLLM, SELF_HOSTED + "/")
    assert request.url == f"{SELF_HOSTED}/chat/completions"
    assert request.headers["authorization"].startswith("Bearer ")


def test_cache_hints_follow_the_providers_setting() -> None:
    body = {
        "model": "a",
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "p", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    hinted = sent(TO_CHAT, body, cache_hints="openai")
    assert "cache_control" not in json.dumps(hinted)
    assert len(hinted["prompt_cache_key"]) == 32  # derived from the team and the cached prefix
    assert (
        sent(TO_CHAT, {**body, "prompt_cache_key": "mine"}, cache_hints="openai")["prompt_cache_key"]
        == "mine"
    )
    passed = sent(TO_CHAT, body, cache_hints="pass")
    assert passed["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_a_key_the_gateway_was_given_is_forwarded() -> None:
    target = provider(base_url=SELF_HOSTED, cache_hints="openai")
    request = TO_CHAT.build_request(
        responses_call({"model": "a", "input": "x"}, "batch-key"), target, SELF_HOSTED
    )
    assert json.loads(request.content)["prompt_cache_key"] == "batch-key"


@pytest.mark.parametrize("store", [None, True, False])
def test_store_is_the_gateways_own_and_not_sent_to_a_chat_upstream(store: bool | None) -> None:
    body: dict[str, Any] = {"model": "a", "input": "x"}
    if store is not None:
        body["store"] = store
    assert "store" not in sent(TO_CHAT, body)


@pytest.mark.parametrize(("name", "case"), fixture_cases("dialects/responses/rejected"))
def test_what_needs_state_or_built_in_tools_is_refused(name: str, case: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        sent(TO_CHAT, case["responses"])
    assert caught.value.status == 400, name
    assert caught.value.param == case["param"]
    assert caught.value.code == case["code"]
    assert case["message_contains"] in caught.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "a", "input": 5}, "input"),
        ({"model": "a", "input": [{"role": "user", "content": 3}]}, "input[0].content"),
        ({"model": "a", "input": "x", "max_output_tokens": -1}, "max_output_tokens"),
        ({"model": "a", "input": "x", "tools": [{"name": "f"}]}, "tools[0]"),
        ({"model": "a", "input": "x", "text": {"format": "json"}}, "text.format"),
        ({"model": "", "input": "x"}, "model"),
        ({"input": "x"}, None),
    ],
)
def test_bad_bodies_are_400s_naming_the_parameter(body: dict[str, Any], param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(json.dumps(body).encode(), Endpoint.RESPONSES, max_messages=100)
    assert caught.value.param == param


def test_the_parse_reads_the_output_limit_and_cache_key() -> None:
    body = {
        "model": "a",
        "input": "x",
        "max_output_tokens": 64,
        "prompt_cache_key": "k",
        "stream": True,
        "gateway": {"batch": "b1"},
        "unknown_field": {"kept": True},
    }
    parsed = parse_request(json.dumps(body).encode(), Endpoint.RESPONSES, max_messages=100)
    assert (parsed.model, parsed.stream, parsed.max_output_tokens, parsed.choices) == ("a", True, 64, 1)
    assert parsed.prompt_cache_key == "k"
    assert parsed.gateway_object == {"batch": "b1"}
    assert parsed.body["unknown_field"] == {"kept": True}  # forwarded untouched to native upstreams
    assert "gateway" not in parsed.body
