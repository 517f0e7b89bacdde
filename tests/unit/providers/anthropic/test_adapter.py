"""The Anthropic adapter against golden fixtures: requests, rejected layouts, responses, streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import (
    InvalidRequest,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)
from gateway.providers.anthropic.adapter import AnthropicAdapter, anthropic_headers
from gateway.providers.base import Endpoint, TokenUsage
from gateway.settings import ProviderKind
from tests.support.openapi import validate
from tests.unit.providers.calls import SECRET, call, fixture_cases, provider, sse_payloads

ADAPTER = AnthropicAdapter(clock=lambda: 1700000000.5)
BASE = "https://api.anthropic.com"
PROVIDER = provider(ProviderKind.ANTHROPIC, base_url=BASE, anthropic_version="2023-06-01")
MODEL = "claude-sonnet-4-5"


def sent(body: dict[str, Any], *, typed: bool = True) -> dict[str, Any]:
    request = ADAPTER.build_request(call(body, upstream_model=MODEL, typed=typed), PROVIDER, BASE)
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/requests"))
def test_request_translation(name: str, case: dict[str, Any]) -> None:
    assert sent(case["openai"]) == case["anthropic"], name


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/requests"))
def test_request_translation_from_the_untyped_body(name: str, case: dict[str, Any]) -> None:
    assert sent(case["openai"], typed=False) == case["anthropic"], name


def test_request_url_and_headers() -> None:
    settings = provider(
        ProviderKind.ANTHROPIC, base_url=BASE, anthropic_version="2024-01-01", headers={"x-b": "1"}
    )
    request = ADAPTER.build_request(
        call({"model": "a", "messages": []}, upstream_model=MODEL), settings, BASE + "/"
    )
    assert request.url == f"{BASE}/v1/messages"
    assert request.headers == {
        "content-type": "application/json",
        "anthropic-version": "2024-01-01",
        "x-api-key": SECRET,
        "x-b": "1",
    }


def test_openai_cache_fields_are_not_sent() -> None:
    body = {"model": "a", "messages": [{"role": "user", "content": "u"}], "prompt_cache_key": "k"}
    request = ADAPTER.build_request(call(body, cache_key="derived"), PROVIDER, BASE)
    assert b"prompt_cache" not in request.content
    assert b"derived" not in request.content


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/rejected"))
def test_rejected_layouts(name: str, case: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        sent(case["openai"])
    assert caught.value.status == 400, name
    assert caught.value.code == case["code"]
    assert case["message_contains"] in caught.value.message


@pytest.mark.parametrize("endpoint", [Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS])
def test_unsupported_endpoints(endpoint: Endpoint) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ADAPTER.build_request(call({"model": "a", "input": "x"}, endpoint=endpoint), PROVIDER, BASE)
    assert caught.value.code == "unsupported_endpoint"
    assert caught.value.status == 400


def token_usage(fields: dict[str, int]) -> TokenUsage:
    return TokenUsage(**fields)


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/responses"))
def test_response_translation(name: str, case: dict[str, Any]) -> None:
    response = ADAPTER.parse_response(
        call({"model": "claude", "messages": []}), json.dumps(case["anthropic"]).encode()
    )
    body = json.loads(response.body)
    assert body == case["openai"], name
    assert response.usage == token_usage(case["usage"])
    validate("CreateChatCompletionResponse", body)


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"content": "text"}'])
def test_garbage_response(body: bytes) -> None:
    with pytest.raises(UpstreamError) as caught:
        ADAPTER.parse_response(call({"model": "a", "messages": []}), body)
    assert caught.value.code == "upstream_bad_response"


def test_error_body_with_200() -> None:
    body = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    with pytest.raises(UpstreamUnavailable, match="Overloaded"):
        ADAPTER.parse_response(call({"model": "a", "messages": []}), body)


def run_stream(case: dict[str, Any]) -> tuple[list[bytes], TokenUsage | None]:
    body = {"model": "claude", "messages": [], "stream": True}
    translator = ADAPTER.stream_translator(call(body, client_wants_usage=case["client_wants_usage"]))
    frames: list[bytes] = []
    for event in case["events"]:
        frames.extend(translator.feed(json.dumps(event).encode()))
    frames.extend(translator.finish())
    return frames, translator.usage


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/streams"))
def test_stream_translation(name: str, case: dict[str, Any]) -> None:
    frames, usage = run_stream(case)
    payloads = sse_payloads(frames)
    assert payloads == case["chunks"], name
    assert usage == token_usage(case["usage"])
    for payload in payloads[:-1]:
        validate("CreateChatCompletionStreamResponse", payload)


def test_stream_usage_chunk_only_when_client_asked() -> None:
    case = dict(fixture_cases("providers/anthropic/streams")[0][1])
    assert case["client_wants_usage"]
    frames, _ = run_stream({**case, "client_wants_usage": False})
    payloads = sse_payloads(frames)
    assert payloads == [p for p in case["chunks"] if p == "[DONE]" or p["choices"]]


def test_stream_error_event_raises() -> None:
    translator = ADAPTER.stream_translator(call({"model": "a", "messages": [], "stream": True}))
    event = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    with pytest.raises(UpstreamUnavailable, match="Overloaded"):
        translator.feed(event)


def test_stream_cut_before_the_end_raises_on_finish() -> None:
    case = fixture_cases("providers/anthropic/streams")[0][1]
    translator = ADAPTER.stream_translator(call({"model": "a", "messages": [], "stream": True}))
    for event in case["events"][:4]:
        translator.feed(json.dumps(event).encode())
    assert translator.usage == TokenUsage(
        prompt_tokens=2112, completion_tokens=1, cached_tokens=2000, cache_write_tokens=100
    )
    with pytest.raises(UpstreamError):
        translator.finish()


def test_stream_without_usage_reports_none_rather_than_zero_counts() -> None:
    """Zero counts would be billed as the upstream's: none lets the gateway estimate them."""
    case = fixture_cases("providers/anthropic/streams")[0][1]
    translator = ADAPTER.stream_translator(call({"model": "a", "messages": [], "stream": True}))
    for event in case["events"]:
        without = {k: v for k, v in event.items() if k != "usage"}
        if "message" in event:
            without["message"] = {k: v for k, v in event["message"].items() if k != "usage"}
        translator.feed(json.dumps(without).encode())
    translator.finish()
    assert (translator.usage, translator.untrusted_usage) == (None, None)


def test_stream_garbage_event() -> None:
    translator = ADAPTER.stream_translator(call({"model": "a", "messages": [], "stream": True}))
    with pytest.raises(UpstreamError) as caught:
        translator.feed(b"<html>")
    assert caught.value.code == "upstream_bad_response"


def anthropic_error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def test_classify_overloaded_529() -> None:
    error = ADAPTER.classify_error(529, anthropic_error("overloaded_error", "Overloaded"), {})
    assert isinstance(error, UpstreamUnavailable)
    assert error.retryable
    assert error.status == 503


def test_classify_rate_limit() -> None:
    error = ADAPTER.classify_error(429, anthropic_error("rate_limit_error", "slow"), {"retry-after": "3"})
    assert isinstance(error, UpstreamRateLimited)
    assert error.retry_after_s == 3.0


def test_classify_invalid_request() -> None:
    error = ADAPTER.classify_error(400, anthropic_error("invalid_request_error", "max_tokens: too big"), {})
    assert isinstance(error, UpstreamRejected)
    assert (error.status, error.code, error.message) == (400, "invalid_request_error", "max_tokens: too big")
    assert not error.retryable


def test_classify_authentication_error_hides_the_key() -> None:
    error = ADAPTER.classify_error(
        401, anthropic_error("authentication_error", f"invalid x-api-key {SECRET}"), {}
    )
    assert error.status == 502
    assert not error.retryable
    assert SECRET not in error.message


def test_anthropic_headers_without_a_key() -> None:
    settings = provider(ProviderKind.ANTHROPIC, api_key=None, anthropic_version="2023-06-01")
    assert anthropic_headers(settings) == {"anthropic-version": "2023-06-01"}
