"""The Responses API passed through to an upstream that serves it (OpenAI, Azure OpenAI).

The body goes out as the client sent it with `model` set to the upstream model (and the cache
key the gateway knows, as on chat). Replies come back as they were sent, with two changes: `model`
is the alias the client asked for, and the usage object carries the exact cost. Usage is read
from the Response, or from a stream's response.completed (or response.incomplete / .failed). The Response's `id` (of
the answer, or of the stream's first Response-carrying event) is kept for the usage record: the
upstream stores the Response under that id, and only the team that created it may name it again
(gateway.responses_store.owners).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.dialects.responses.response import usage_cost
from gateway.errors import UpstreamError
from gateway.providers.base import TokenUsage, UpstreamCall, UpstreamRequest, UpstreamResponse
from gateway.providers.cache_hints import apply_openai_hints
from gateway.providers.errors import bad_response
from gateway.providers.openai.adapter import OpenAIAdapter, hint_mode
from gateway.providers.usage_bounds import UntrustedUsage, bounded, reported_count
from gateway.schemas.responses import UpstreamEventHead, UpstreamInputDetails, UpstreamResponseUsage
from gateway.settings import Provider, ProviderKind

# Events that carry the whole Response; the last three end a stream.
_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def responses_usage(usage: UpstreamResponseUsage) -> TokenUsage:
    """The counts of a Responses usage object in OpenAI chat terms; UntrustedUsage when one cannot be
    true. Cached and cache-write tokens are parts of input_tokens, as they are of prompt_tokens."""
    details = usage.input_tokens_details or UpstreamInputDetails()
    return bounded(
        TokenUsage(
            prompt_tokens=reported_count(usage.input_tokens, "input_tokens"),
            completion_tokens=reported_count(usage.output_tokens, "output_tokens"),
            cached_tokens=reported_count(details.cached_tokens, "cached_tokens"),
            cache_write_tokens=reported_count(details.cache_write_tokens, "cache_write_tokens"),
        )
    )


@dataclass(frozen=True, slots=True)
class Metered:
    """A Response as it goes to the client, and the usage it reported."""

    document: dict[str, Any]
    usage: TokenUsage | None
    untrusted_usage: str | None
    service_tier: str | None = None  # the tier the Response says served it


def metered_response(call: UpstreamCall, document: dict[str, Any]) -> Metered:
    """`document` (a Response) with `model` set to the alias and `usage.cost` added (at the
    service tier it names), and its usage."""
    document["model"] = call.body["model"]
    tier = document.get("service_tier")
    tier = tier if isinstance(tier, str) and tier else None
    raw_usage = document.get("usage")
    if not isinstance(raw_usage, dict):
        return Metered(document, None, None, tier)
    try:
        usage = responses_usage(msgspec.convert(raw_usage, UpstreamResponseUsage))
    except (UntrustedUsage, msgspec.ValidationError) as exc:  # the answer is served as it came
        return Metered(document, None, str(exc), tier)
    cost = usage_cost(call, usage, tier)
    if cost is not None:
        document["usage"] = {**raw_usage, "cost": cost}
    return Metered(document, usage, None, tier)


@dataclass(frozen=True, slots=True)
class NativeResponsesAdapter:
    """Speaks the Responses API; `openai` is the provider's chat adapter, for auth and errors."""

    openai: OpenAIAdapter

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        body = apply_openai_hints(
            {**call.body, "model": call.upstream_model}, hint_mode(provider, base_url), call.cache_key
        )
        base = base_url.rstrip("/")
        # Azure serves the Responses API on its v1 surface only, the deployment named by `model`
        url = f"{base}/openai/v1/responses" if provider.kind is ProviderKind.AZURE else f"{base}/responses"
        headers = {
            "content-type": "application/json",
            **self.openai.auth_headers(provider),
            **provider.headers,
        }
        return UpstreamRequest(url=url, headers=headers, content=msgspec.json.encode(body))

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        document = _document(body, "not a JSON object")
        if "output" not in document and document.get("error") is not None:
            raise UpstreamError("the upstream reported an error instead of a response")
        metered = metered_response(call, document)
        return UpstreamResponse(
            body=msgspec.json.encode(metered.document),
            usage=metered.usage,
            untrusted_usage=metered.untrusted_usage,
            response_id=response_id(document),
            service_tier=metered.service_tier,
        )

    def stream_translator(self, call: UpstreamCall) -> NativeResponsesStream:
        return NativeResponsesStream(call)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return self.openai.classify_error(status, body, headers)


def response_id(document: dict[str, Any]) -> str | None:
    """A Response's id, if it has one."""
    found = document.get("id")
    return found if isinstance(found, str) and found else None


def _document(data: bytes, problem: str) -> dict[str, Any]:
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise bad_response(problem) from None
    if not isinstance(document, dict):
        raise bad_response(problem)
    return document


class NativeResponsesStream:
    """Re-emits each event with its `event:` line; the Response-carrying events get the alias and
    (on the last one) the cost. An `error` event ends the stream as an upstream failure.
    `response_id`: the Response's id, from the first event that carries it (response.created)."""

    def __init__(self, call: UpstreamCall) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self.response_id: str | None = None
        self.service_tier: str | None = None  # the tier the last Response says served it
        self._call = call
        self._finished = False

    def feed(self, data: bytes) -> list[bytes]:
        if data.strip() == b"[DONE]":  # not part of the Responses API; some servers add it anyway
            return []
        try:
            head = msgspec.json.decode(data, type=UpstreamEventHead)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream event is not a JSON object") from None
        if head.type == "error":
            raise UpstreamError(f"the upstream reported an error: {head.message or 'no message'}")
        if head.type in _LIFECYCLE or head.type in _TERMINAL:
            data = self._with_alias(data, terminal=head.type in _TERMINAL)
        return [b"event: " + head.type.encode() + b"\ndata: " + data + b"\n\n"]

    def finish(self) -> list[bytes]:
        if not self._finished:
            raise UpstreamError("the upstream stream ended before the response was complete")
        return []

    def _with_alias(self, data: bytes, *, terminal: bool) -> bytes:
        event = _document(data, "a stream event is not a JSON object")
        response = event.get("response")
        if not isinstance(response, dict):
            raise bad_response(f"a {event.get('type')} event without its response")
        if self.response_id is None:
            self.response_id = response_id(response)
        metered = metered_response(self._call, response)
        if terminal:
            self._finished = True
            self.usage, self.untrusted_usage = metered.usage, metered.untrusted_usage
            self.service_tier = metered.service_tier
        event["response"] = metered.document
        return msgspec.json.encode(event)
