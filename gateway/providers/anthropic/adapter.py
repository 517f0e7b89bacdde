"""The Anthropic adapter: chat completions translated to the Messages API and back.

The translation itself lives in `request`, `response` and `stream`; this module joins them behind
the ProviderAdapter Protocol, and says what every request to an Anthropic API carries (its headers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from gateway.errors import InvalidRequest, UpstreamError
from gateway.providers.anthropic.request import to_messages_request
from gateway.providers.anthropic.response import ReplyContext, anthropic_error_detail, parse_messages_response
from gateway.providers.anthropic.stream import AnthropicStreamTranslator
from gateway.providers.anthropic.structured import answer_tool
from gateway.providers.base import Endpoint, UpstreamCall, UpstreamRequest, UpstreamResponse
from gateway.providers.errors import classify_status
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import Provider


@dataclass(frozen=True, slots=True)
class AnthropicAdapter:
    """Speaks the Messages API; `clock` gives the `created` time of translated responses."""

    clock: Callable[[], float] = time.time

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        if call.endpoint is not Endpoint.CHAT:
            raise InvalidRequest(
                f"/v1/{call.endpoint.value} is not supported by Anthropic models; use /v1/chat/completions",
                code="unsupported_endpoint",
            )
        request = to_messages_request(_chat_of(call), call.upstream_model, stream=call.stream)
        return UpstreamRequest(
            url=f"{base_url.rstrip('/')}/v1/messages",
            headers={"content-type": "application/json", **anthropic_headers(provider)},
            content=msgspec.json.encode(request),
        )

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        return parse_messages_response(body, int(self.clock()), reply_context(call))

    def stream_translator(self, call: UpstreamCall) -> AnthropicStreamTranslator:
        return AnthropicStreamTranslator(reply_context(call), call.client_wants_usage, self.clock)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return classify_status(status, anthropic_error_detail(body), headers)


def anthropic_headers(provider: Provider) -> dict[str, str]:
    """What every request to an Anthropic API carries: its version, the key, the catalog's headers."""
    headers = {"anthropic-version": provider.anthropic_version}
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    return {**headers, **provider.headers}


def reply_context(call: UpstreamCall) -> ReplyContext:
    """The reply names the alias asked for, not Anthropic's model (SPEC section 2)."""
    alias = call.body.get("model")
    tool = answer_tool(_chat_of(call)) if call.endpoint is Endpoint.CHAT else None
    return ReplyContext(
        model=alias if isinstance(alias, str) else call.upstream_model,
        tariff=call.tariff,
        answer_tool=tool.name if tool is not None else None,
    )


def _chat_of(call: UpstreamCall) -> ChatCompletionRequest:
    if call.chat is not None:
        return call.chat
    try:
        return msgspec.convert(call.body, ChatCompletionRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid chat completion request: {exc}") from None
