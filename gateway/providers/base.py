"""The small Protocol every provider kind implements; adapters are pure (no I/O).

The executor (`gateway.dispatch`) owns the HTTP client: it asks an adapter to build the upstream
request, sends it, and hands the bytes back to the adapter to parse into OpenAI format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any, Protocol

import msgspec

from gateway.errors import UpstreamError
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import Provider


class Endpoint(str, Enum):
    CHAT = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"  # OpenAI's Responses API (gateway.dialects.responses.adapter)
    MESSAGES = "messages"  # Anthropic's Messages API inbound (gateway.dialects.messages.adapter)


def estimated_tokens(text_bytes: int) -> int:
    """Tokens in that many bytes of text, guessed without a tokenizer: ~4 bytes a token."""
    return (max(text_bytes, 0) + 3) // 4


class TokenUsage(msgspec.Struct, frozen=True):
    """Token counts in OpenAI terms: cached and cache-write tokens are parts of prompt_tokens."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class Pricing(Protocol):
    """A deployment's price as the adapters see it (`gateway.metering.pricing.Tariff`): what a
    reply's usage costs, for the `usage.cost` it carries, at the service tier it was served at."""

    def cost(self, usage: TokenUsage) -> Decimal: ...

    def tier(self, name: str | None) -> Pricing: ...


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One request as the gateway means to send it, before any provider's translation."""

    endpoint: Endpoint
    body: dict[str, Any]  # what the client sent, `gateway` removed; `model` is still the alias
    upstream_model: str
    stream: bool
    client_wants_usage: bool  # the client set stream_options.include_usage
    team_id: str
    chat: ChatCompletionRequest | None = None  # the typed view, for chat completions
    cache_key: str | None = None  # given by the client, or derived from the cached prefix
    # the deployment's price at the service tier asked for, for the cost a reply carries (usage.cost)
    tariff: Pricing | None = None
    # the client's W3C trace context (`traceparent`, `tracestate`), sent upstream as it came
    trace_headers: dict[str, str] | None = None
    # a Messages client's `anthropic-beta` header, for an Anthropic upstream (dialects.messages.betas)
    anthropic_beta: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    url: str
    headers: dict[str, str]
    content: bytes
    method: str = "POST"


@dataclass(frozen=True, slots=True)
class UpstreamResponse:
    body: bytes  # an OpenAI-format JSON body, ready for the client
    usage: TokenUsage | None  # None when the upstream reported none, or counts not believed
    untrusted_usage: str | None = None  # why the reported counts were not believed (usage_bounds)
    cost: Decimal | None = None  # what `usage` costs at the call's tariff, as the body's usage.cost says
    response_id: str | None = None  # the id of a Response the upstream stores (responses_native)
    service_tier: str | None = None  # the tier the upstream said it served (its `service_tier`)


class StreamTranslator(Protocol):
    """Turns an upstream's SSE events into OpenAI SSE frames, and keeps the usage it saw."""

    usage: TokenUsage | None  # the last report, None if none came or it was not believed
    untrusted_usage: str | None  # why the last report was not believed (usage_bounds)

    def feed(self, data: bytes) -> list[bytes]:
        """Take one SSE event's `data` payload; return complete frames (`data: ...\\n\\n`) to send."""
        ...

    def finish(self) -> list[bytes]:
        """The upstream stream ended cleanly: return any last frames (e.g. `data: [DONE]\\n\\n`)."""
        ...


def stream_cost(translator: StreamTranslator) -> Decimal | None:
    """What a translator that prices its stream's usage (for the usage chunk's `usage.cost`) says
    `usage` costs, kept as its `cost`: the usage record takes that amount rather than pricing the
    same counts again. None from a translator that does not price it.

    Looked up as an optional attribute: an isinstance check against a runtime Protocol costs
    more than the rest of a chunk's handling."""
    cost = getattr(translator, "cost", None)
    return cost if isinstance(cost, Decimal) else None


class ProviderAdapter(Protocol):
    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest: ...

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse: ...

    def stream_translator(self, call: UpstreamCall) -> StreamTranslator: ...

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError: ...
