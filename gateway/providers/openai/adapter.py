"""The adapter for every OpenAI-compatible upstream (OpenAI, vLLM, SGLang, TGI, the mock).

Bodies are forwarded as the client sent them (only `model`, stream usage and cache hints are
touched); responses and stream chunks pass through verbatim, decoded only as far as metering needs,
but for the members the gateway sets in them (`gateway.providers.openai.reply_members`): `model` is the
alias the client asked for, and the usage carries its cost and the cached tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from decimal import Decimal
from urllib.parse import urlsplit

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.base import (
    Endpoint,
    TokenUsage,
    UpstreamCall,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.cache_hints import HintMode, apply_openai_hints
from gateway.providers.errors import UpstreamErrorDetail, bad_response, classify_status
from gateway.providers.openai.reply_members import with_model, with_usage_members
from gateway.providers.usage_bounds import UntrustedUsage, bounded, reported_count
from gateway.schemas.openai import ErrorEnvelope, ErrorObject, MeteredReply, Usage
from gateway.settings import Provider, ProviderKind

DONE_FRAME = b"data: [DONE]\n\n"


@functools.cache  # a handful of base URLs, from the catalog, asked about on every request
def is_openai_api(url: str) -> bool:
    """Whether `url` is OpenAI's own API, not another server speaking its protocol."""
    return urlsplit(url).hostname == "api.openai.com"


def openai_auth_headers(provider: Provider) -> dict[str, str]:
    """OpenAI and the servers that copy it take the key as a bearer token."""
    return {"authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}


def hint_mode(provider: Provider, base_url: str) -> HintMode:
    """The provider's `cache_hints` setting, with "auto" resolved (OpenAI and Azure get "openai")."""
    if provider.cache_hints in ("openai", "strip", "pass"):
        return provider.cache_hints  # type: ignore[return-value]
    if provider.kind is ProviderKind.AZURE or is_openai_api(base_url):
        return "openai"
    return "strip"


def serves_tiers(provider: Provider, base_url: str) -> bool:
    """Whether the upstream has OpenAI's service tiers, and is sent a request's `service_tier`: as
    the provider's `service_tiers` says, else (`auto`) OpenAI's own API, Azure and the mock. Other
    OpenAI-compatible servers (vLLM, SGLang...) have no tiers: the field is dropped, and the
    request is recorded at the tier it asked for."""
    if provider.service_tiers != "auto":
        return provider.service_tiers == "forward"
    return provider.kind in (ProviderKind.AZURE, ProviderKind.MOCK) or is_openai_api(base_url)


def token_usage(usage: Usage) -> TokenUsage:
    """The counts of an OpenAI usage object; UntrustedUsage when one cannot be true."""
    details = usage.prompt_tokens_details
    return bounded(
        TokenUsage(
            prompt_tokens=reported_count(usage.prompt_tokens, "prompt_tokens"),
            completion_tokens=reported_count(usage.completion_tokens, "completion_tokens"),
            cached_tokens=reported_count(details.cached_tokens, "cached_tokens") if details else 0,
        )
    )


def sse_frame(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


def alias_of(call: UpstreamCall) -> bytes | None:
    """The model the client asked for, as the JSON string a reply's `model` is set to."""
    alias = call.body.get("model")
    return msgspec.json.encode(alias) if isinstance(alias, str) else None


def lacks_cached_tokens(call: UpstreamCall, usage: Usage) -> bool:
    """Whether usage.prompt_tokens_details.cached_tokens is to be added (embeddings have none)."""
    details = usage.prompt_tokens_details
    return call.endpoint is not Endpoint.EMBEDDINGS and (details is None or details.cached_tokens is None)


def priced(call: UpstreamCall, usage: TokenUsage | None, tier: str | None = None) -> Decimal | None:
    """What trusted counts cost at the call's tariff (at `tier`, where the upstream said
    which tier served it): usage.cost, and the usage record's cost."""
    if usage is None or call.tariff is None:
        return None
    tariff = call.tariff if tier is None else call.tariff.tier(tier)
    return tariff.cost(usage)


def served_tier(reply: MeteredReply) -> str | None:
    """The service tier an answer or chunk says it was served at (OpenAI's `service_tier`)."""
    tier = reply.service_tier
    return tier if isinstance(tier, str) and tier else None


class OpenAIAdapter:
    """Any server that speaks OpenAI's HTTP API; subclasses change only the URL and auth header."""

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        body = {**call.body, "model": call.upstream_model}
        if call.stream:
            stream_options = body.get("stream_options")
            kept = stream_options if isinstance(stream_options, dict) else {}
            body["stream_options"] = {**kept, "include_usage": True}
        if "service_tier" in body and not serves_tiers(provider, base_url):
            del body["service_tier"]
        cache_key = call.cache_key if call.endpoint is Endpoint.CHAT else None
        body = apply_openai_hints(body, hint_mode(provider, base_url), cache_key)
        headers = {"content-type": "application/json", **self.auth_headers(provider), **provider.headers}
        return UpstreamRequest(
            url=self.url(call, provider, base_url.rstrip("/")),
            headers=headers,
            content=msgspec.json.encode(body),
        )

    def url(self, call: UpstreamCall, provider: Provider, base_url: str) -> str:
        return f"{base_url}/{call.endpoint.value}"

    def auth_headers(self, provider: Provider) -> dict[str, str]:
        return openai_auth_headers(provider)

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        try:
            metered = msgspec.json.decode(body, type=MeteredReply)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("not a JSON object") from None
        if metered.error is not None and metered.choices is None:
            raise _stream_or_body_error(metered.error)
        alias = call.body.get("model")
        if isinstance(alias, str) and isinstance(metered.model, str) and metered.model != alias:
            body = with_model(body, msgspec.json.encode(alias))
        tier = served_tier(metered)
        if metered.usage is None:
            return UpstreamResponse(body=body, usage=None, service_tier=tier)
        cached = lacks_cached_tokens(call, metered.usage)
        try:
            usage = token_usage(metered.usage)
        except UntrustedUsage as exc:  # the answer itself is served as it came, with no cost
            return UpstreamResponse(
                body=with_usage_members(body, None, cached),
                usage=None,
                untrusted_usage=str(exc),
                service_tier=tier,
            )
        cost = priced(call, usage, tier)
        body = with_usage_members(body, None if cost is None else format(cost, "f"), cached)
        return UpstreamResponse(body=body, usage=usage, cost=cost, service_tier=tier)

    def stream_translator(self, call: UpstreamCall) -> OpenAIStreamTranslator:
        return OpenAIStreamTranslator(call)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return classify_status(status, openai_error_detail(body), headers)


def openai_error_detail(body: bytes) -> UpstreamErrorDetail:
    """The message/type/param/code of an OpenAI error object; empty when the body is not one."""
    try:
        envelope = msgspec.json.decode(body, type=ErrorEnvelope)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return UpstreamErrorDetail()
    error = envelope.error
    if isinstance(error, str):
        return UpstreamErrorDetail(message=error)
    if error is None:
        return UpstreamErrorDetail()
    code = str(error.code) if error.code is not None else None
    return UpstreamErrorDetail(message=error.message, type=error.type, param=error.param, code=code)


def _stream_or_body_error(error: ErrorObject | str) -> UpstreamError:
    message = error if isinstance(error, str) else error.message
    return UpstreamError(f"the upstream reported an error: {message or 'no message'}")


class OpenAIStreamTranslator:
    """Passes OpenAI chunks through verbatim, `model` set to the alias; notes usage, prices it, and
    drops the usage chunk if unwanted."""

    def __init__(self, call: UpstreamCall) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self.cost: Decimal | None = None  # what `usage` costs (gateway.providers.base.stream_cost)
        # the tier the usage chunk says served the stream (read off that chunk only: the others
        # are passed through undecoded); None: not said, or no usage chunk came
        self.service_tier: str | None = None
        self._call = call
        self._alias = alias_of(call)
        self._drop_usage_chunk = not call.client_wants_usage
        self._done = False

    def feed(self, data: bytes) -> list[bytes]:
        if len(data) < 16 and data.strip() == b"[DONE]":  # a chunk is a JSON object, longer than that
            self._done = True
            return [DONE_FRAME]
        if _may_carry_usage(data) or b'"error"' in data:
            chunk = _decode_chunk(data)
            if chunk.error is not None:
                raise _stream_or_body_error(chunk.error)
            if chunk.usage is not None:
                self.service_tier = served_tier(chunk) or self.service_tier
                self._note_usage(chunk.usage)
                if self._drop_usage_chunk and not chunk.choices:
                    return []
                cost = None if self.cost is None else format(self.cost, "f")
                data = with_usage_members(data, cost, lacks_cached_tokens(self._call, chunk.usage))
        if self._alias is not None:
            data = with_model(data, self._alias)
        return [sse_frame(data)]

    def finish(self) -> list[bytes]:
        return [] if self._done else [DONE_FRAME]

    def _note_usage(self, usage: Usage) -> None:
        try:
            self.usage, self.untrusted_usage = token_usage(usage), None
        except UntrustedUsage as exc:
            self.usage, self.untrusted_usage = None, str(exc)
        self.cost = priced(self._call, self.usage, self.service_tier)


def _may_carry_usage(data: bytes) -> bool:
    """With include_usage OpenAI puts `"usage":null` on every chunk; only a real one needs decoding.
    JSON escapes the quotes inside strings, so the bytes `"usage"` are a key, or a whole string
    value (a delta of just that word): then the chunk is decoded, which is always safe."""
    at = data.find(b'"usage"')
    if at < 0:
        return False
    after = data[at + 7 : at + 14]
    return not (after.startswith(b":null") or after.startswith(b": null"))


def _decode_chunk(data: bytes) -> MeteredReply:
    try:
        return msgspec.json.decode(data, type=MeteredReply)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("a stream chunk is not a JSON object") from None
