"""`service_tier` per provider kind: sent to OpenAI, Azure and the mock, dropped for other
OpenAI-compatible servers, mapped to Anthropic's values; the tier an answer says served it read
back and priced at that tier's tariff; a value outside the enum refused."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest

from gateway.dialects.messages.native import NativeMessagesAdapter
from gateway.dialects.messages.request import to_chat_body
from gateway.dialects.responses.adapter import TranslatedResponsesAdapter
from gateway.dialects.responses.native import NativeResponsesAdapter
from gateway.errors import InvalidRequest
from gateway.metering.pricing import Tariff
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.azure import AzureAdapter
from gateway.proxy.request import parse_request
from gateway.schemas.anthropic import MessagesRequest
from gateway.settings import Price, ProviderKind
from gateway.settings.catalog import TierMultipliers
from tests.unit.providers.calls import call, provider, sse_payloads

PRICE = Price(input=Decimal(2), output=Decimal(8), flex_input=Decimal(1), flex_output=Decimal(4))
TARIFF = Tariff(PRICE)
PRICE_BY_MULTIPLIER = Price(
    input=Decimal(2), output=Decimal(8), tier_multipliers=TierMultipliers(priority=Decimal(2))
)
OPENAI = "https://api.openai.com/v1"
VLLM = "http://10.0.0.5:8000/v1"
CHAT = {"model": "alias", "messages": [{"role": "user", "content": "hi"}], "service_tier": "flex"}
USAGE = {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000, "total_tokens": 2_000_000}


def priced_call(body: dict[str, Any], tier: str | None = "flex", **kwargs: Any) -> UpstreamCall:
    """A call as the proxy makes it: priced at the tier the request asks for."""
    return dataclasses.replace(call(body, **kwargs), tariff=TARIFF.tier(tier))


def sent_body(adapter: Any, kind: ProviderKind, base_url: str, body: dict[str, Any], **kwargs: Any) -> Any:
    request = adapter.build_request(call(body, **kwargs), provider(kind, base_url=base_url), base_url)
    return json.loads(request.content)


@pytest.mark.parametrize(
    ("adapter", "kind", "base_url"),
    [
        (OpenAIAdapter(), ProviderKind.OPENAI, OPENAI),
        (AzureAdapter(), ProviderKind.AZURE, "https://res.openai.azure.com"),
        (OpenAIAdapter(), ProviderKind.MOCK, "http://mock.invalid/v1"),
    ],
)
def test_openai_azure_and_the_mock_are_sent_the_tier(adapter: Any, kind: ProviderKind, base_url: str) -> None:
    assert sent_body(adapter, kind, base_url, CHAT)["service_tier"] == "flex"


def test_a_self_hosted_server_is_not_sent_the_tier() -> None:
    body = sent_body(OpenAIAdapter(), ProviderKind.OPENAI, VLLM, CHAT)
    assert "service_tier" not in body and body["messages"] == CHAT["messages"]


def test_the_providers_service_tiers_setting_overrides_the_url() -> None:
    proxy = "https://llm-proxy.internal/v1"  # OpenAI behind a proxy of the operator's own
    forwarding = provider(ProviderKind.OPENAI, base_url=proxy, service_tiers="forward")
    dropping = provider(ProviderKind.OPENAI, base_url=OPENAI, service_tiers="drop")

    forwarded = OpenAIAdapter().build_request(call(CHAT), forwarding, proxy)
    dropped = OpenAIAdapter().build_request(call(CHAT), dropping, OPENAI)

    assert json.loads(forwarded.content)["service_tier"] == "flex"
    assert "service_tier" not in json.loads(dropped.content)


def test_a_translated_responses_request_carries_the_tier_to_openai_only() -> None:
    request = {"model": "alias", "input": "hi", "service_tier": "priority"}
    adapter = TranslatedResponsesAdapter(OpenAIAdapter())
    to_openai = sent_body(
        adapter, ProviderKind.OPENAI, OPENAI, request, endpoint=Endpoint.RESPONSES, typed=False
    )
    to_vllm = sent_body(adapter, ProviderKind.OPENAI, VLLM, request, endpoint=Endpoint.RESPONSES, typed=False)
    assert to_openai["service_tier"] == "priority"
    assert "service_tier" not in to_vllm


@pytest.mark.parametrize(
    ("asked", "anthropic"),
    [("auto", "auto"), ("priority", "auto"), ("default", "standard_only"), ("flex", "standard_only")],
)
def test_anthropic_is_sent_its_own_tier_values(asked: str, anthropic: str) -> None:
    body = sent_body(
        AnthropicAdapter(),
        ProviderKind.ANTHROPIC,
        "https://api.anthropic.com",
        {**CHAT, "service_tier": asked},
    )
    assert body["service_tier"] == anthropic


def test_anthropic_without_a_tier_is_sent_none() -> None:
    body = {k: v for k, v in CHAT.items() if k != "service_tier"}
    assert "service_tier" not in sent_body(
        AnthropicAdapter(), ProviderKind.ANTHROPIC, "https://api.anthropic.com", body
    )


@pytest.mark.parametrize(("asked", "chat"), [("standard_only", "default"), ("auto", "auto")])
def test_a_messages_request_speaks_openais_tier_to_a_chat_upstream(asked: str, chat: str) -> None:
    request = MessagesRequest(
        model="alias",
        max_tokens=10,
        messages=[],
        service_tier=asked,  # type: ignore[arg-type]
    )
    body = to_chat_body(request, {}, max_tokens_field="max_tokens")
    assert body["service_tier"] == chat


def test_the_served_tier_is_read_and_priced_from_a_completion() -> None:
    answer = {
        "id": "c",
        "object": "chat.completion",
        "choices": [],
        "usage": USAGE,
        "service_tier": "default",
    }
    response = OpenAIAdapter().parse_response(priced_call(CHAT), json.dumps(answer).encode())
    # asked for flex (1 + 4 USD), served at default: 2 + 8 USD
    assert response.service_tier == "default"
    assert response.cost == Decimal(10)
    assert Decimal(json.loads(response.body)["usage"]["cost"]) == Decimal(10)


def test_a_completion_served_at_the_tier_asked_for_is_priced_at_it() -> None:
    answer = {"id": "c", "object": "chat.completion", "choices": [], "usage": USAGE, "service_tier": "flex"}
    response = OpenAIAdapter().parse_response(priced_call(CHAT), json.dumps(answer).encode())
    assert (response.service_tier, response.cost) == ("flex", Decimal(5))


def test_an_answer_naming_no_tier_is_priced_at_the_tier_asked_for() -> None:
    answer = {"id": "c", "object": "chat.completion", "choices": [], "usage": USAGE}
    response = OpenAIAdapter().parse_response(priced_call(CHAT), json.dumps(answer).encode())
    assert (response.service_tier, response.cost) == (None, Decimal(5))


def test_a_streams_usage_chunk_names_the_served_tier() -> None:
    translator = OpenAIAdapter().stream_translator(
        priced_call({**CHAT, "stream": True}, client_wants_usage=True)
    )
    head = {"id": "c", "object": "chat.completion.chunk", "service_tier": "priority"}
    translator.feed(json.dumps({**head, "choices": [{"index": 0, "delta": {"content": "x"}}]}).encode())
    frames = translator.feed(json.dumps({**head, "choices": [], "usage": USAGE}).encode())
    # priority has no price of its own here: the normal one
    assert translator.service_tier == "priority"
    assert translator.cost == Decimal(10)
    assert Decimal(sse_payloads(frames)[0]["usage"]["cost"]) == Decimal(10)


def test_a_native_response_names_the_served_tier() -> None:
    adapter = NativeResponsesAdapter(OpenAIAdapter())
    body = {"model": "alias", "input": "hi", "service_tier": "flex"}
    document = {"id": "resp_1", "object": "response", "output": [], "service_tier": "flex",
                "usage": {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "total_tokens": 2_000_000}}  # fmt: skip
    response = adapter.parse_response(
        priced_call(body, endpoint=Endpoint.RESPONSES, typed=False), json.dumps(document).encode()
    )
    assert response.service_tier == "flex"
    assert Decimal(json.loads(response.body)["usage"]["cost"]) == Decimal(5)


def test_anthropics_served_tier_is_named_in_openais_terms() -> None:
    answer = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "service_tier": "standard"},
    }  # fmt: skip
    response = AnthropicAdapter().parse_response(priced_call(CHAT), json.dumps(answer).encode())
    assert (response.service_tier, response.cost) == ("default", Decimal(10))


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        (Endpoint.CHAT, {**CHAT, "service_tier": "scale"}),
        (Endpoint.RESPONSES, {"model": "m", "input": "hi", "service_tier": "cheap"}),
        (
            Endpoint.MESSAGES,
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "service_tier": "priority",
            },
        ),
    ],
)
def test_a_tier_outside_the_enum_is_a_bad_request(endpoint: Endpoint, body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_request(json.dumps(body).encode(), endpoint, 100)
    assert raised.value.param == "service_tier"


@pytest.mark.parametrize(
    ("endpoint", "body", "tier"),
    [
        (Endpoint.CHAT, CHAT, "flex"),
        (Endpoint.RESPONSES, {"model": "m", "input": "hi", "service_tier": "priority"}, "priority"),
        (
            Endpoint.MESSAGES,
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "service_tier": "standard_only",
            },
            "default",
        ),
        (Endpoint.CHAT, {"model": "m", "messages": [{"role": "user", "content": "x"}]}, None),
    ],
)
def test_the_tier_asked_for_is_read_in_openais_terms(
    endpoint: Endpoint, body: dict[str, Any], tier: str | None
) -> None:
    assert parse_request(json.dumps(body).encode(), endpoint, 100).service_tier == tier


def test_a_message_passed_through_to_anthropic_is_priced_at_the_tier_it_names() -> None:
    body = {
        "model": "alias",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "service_tier": "auto",
    }
    answer = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "service_tier": "priority"},
    }  # fmt: skip
    priced_at = dataclasses.replace(
        call(body, endpoint=Endpoint.MESSAGES, typed=False), tariff=Tariff(PRICE_BY_MULTIPLIER).tier("auto")
    )
    response = NativeMessagesAdapter().parse_response(priced_at, json.dumps(answer).encode())
    # priority at twice the normal 2 + 8 USD
    assert response.service_tier == "priority"
    assert Decimal(json.loads(response.body)["usage"]["cost"]) == Decimal(20)
