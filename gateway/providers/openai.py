"""The adapter for every OpenAI-compatible upstream (OpenAI, vLLM, SGLang, TGI, the mock).

Bodies are forwarded as the client sent them (only `model`, stream usage and cache hints are
touched); responses and stream chunks pass through verbatim, decoded only as far as metering needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.base import (
    Endpoint,
    TokenUsage,
    UpstreamCall,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.cache_hints import apply_openai_hints, hint_mode
from gateway.providers.openai_wire import ErrorEnvelope, ErrorObject, Metered, Usage
from gateway.providers.upstream_errors import UpstreamErrorDetail, bad_response, classify_status
from gateway.providers.usage_bounds import UntrustedUsage, bounded, reported_count
from gateway.settings import Provider

DONE_FRAME = b"data: [DONE]\n\n"


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


class OpenAIAdapter:
    """Any server that speaks OpenAI's HTTP API; subclasses change only the URL and auth header."""

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        body = {**call.body, "model": call.upstream_model}
        if call.stream:
            stream_options = body.get("stream_options")
            kept = stream_options if isinstance(stream_options, dict) else {}
            body["stream_options"] = {**kept, "include_usage": True}
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
        return {"authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        try:
            metered = msgspec.json.decode(body, type=Metered)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("not a JSON object") from None
        if metered.error is not None and metered.choices is None:
            raise _stream_or_body_error(metered.error)
        if metered.usage is None:
            return UpstreamResponse(body=body, usage=None)
        details = metered.usage.prompt_tokens_details
        if call.endpoint is not Endpoint.EMBEDDINGS and (details is None or details.cached_tokens is None):
            body = _with_cached_tokens(body)
        try:
            usage = token_usage(metered.usage)
        except UntrustedUsage as exc:  # the answer itself is served as it came
            return UpstreamResponse(body=body, usage=None, untrusted_usage=str(exc))
        return UpstreamResponse(body=body, usage=usage)

    def stream_translator(self, call: UpstreamCall) -> OpenAIStreamTranslator:
        return OpenAIStreamTranslator(call)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return classify_status(status, openai_error_detail(body), headers)


def _skip_space(body: bytes, at: int) -> int:
    while at < len(body) and body[at] in _SPACE:
        at += 1
    return at


def _object_after(body: bytes, at: int) -> int:
    """Where the members start of the object that `: {` opens at `at` (whitespace allowed), or -1."""
    at = _skip_space(body, at)
    if at >= len(body) or body[at] != _COLON:
        return -1
    at = _skip_space(body, at + 1)
    if at >= len(body) or body[at] != _OPEN:
        return -1
    return at + 1


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


_CACHED_DETAILS = b'"prompt_tokens_details":{"cached_tokens":0}'
_SPACE = frozenset(b" \t\n\r")  # JSON's whitespace
_COLON, _OPEN, _CLOSE = ord(":"), ord("{"), ord("}")


def _with_cached_tokens(body: bytes) -> bytes:
    """The body with `usage.prompt_tokens_details.cached_tokens` (0) added.

    Servers that leave it out (vLLM, most OpenAI-compatible ones) send it on every response, so
    the member is spliced in after `"usage":{` when that opening is the body's only one and no
    `prompt_tokens_details` follows it: JSON escapes every quote inside a string, so the bytes
    `"usage":{` can only open an object under that key. Anything else is decoded and re-encoded.
    (The caller found a top-level `usage` object, so `"usage"` is in the body.)"""
    first = body.find(b'"usage"')
    # (a member of usage comes after its key: the rest of the body is where to look for one)
    if body.find(b'"usage"', first + 1) == -1 and body.find(b'"prompt_tokens_details"', first) == -1:
        opening = _object_after(body, first + len(b'"usage"'))
        if opening != -1:
            inside = _skip_space(body, opening)
            if inside < len(body) and body[inside] == _CLOSE:  # "usage": {}
                return b"".join((body[:first], b'"usage":{', _CACHED_DETAILS, b"}", body[inside + 1 :]))
            return b"".join((body[:opening], _CACHED_DETAILS, b",", body[opening:]))
    document: dict[str, Any] = msgspec.json.decode(body)
    usage = document["usage"]
    details = usage.get("prompt_tokens_details")
    usage["prompt_tokens_details"] = {**(details if isinstance(details, dict) else {}), "cached_tokens": 0}
    return msgspec.json.encode(document)


class OpenAIStreamTranslator:
    """Passes OpenAI chunks through verbatim; notes usage and drops the usage chunk if unwanted."""

    def __init__(self, call: UpstreamCall) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
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
                self._note_usage(chunk.usage)
                if self._drop_usage_chunk and not chunk.choices:
                    return []
        return [sse_frame(data)]

    def finish(self) -> list[bytes]:
        return [] if self._done else [DONE_FRAME]

    def _note_usage(self, usage: Usage) -> None:
        try:
            self.usage, self.untrusted_usage = token_usage(usage), None
        except UntrustedUsage as exc:
            self.usage, self.untrusted_usage = None, str(exc)


def _may_carry_usage(data: bytes) -> bool:
    """With include_usage OpenAI puts `"usage":null` on every chunk; only a real one needs decoding.
    JSON escapes the quotes inside strings, so the bytes `"usage"` are a key, or a whole string
    value (a delta of just that word): then the chunk is decoded, which is always safe."""
    at = data.find(b'"usage"')
    if at < 0:
        return False
    after = data[at + 7 : at + 14]
    return not (after.startswith(b":null") or after.startswith(b": null"))


def _decode_chunk(data: bytes) -> Metered:
    try:
        return msgspec.json.decode(data, type=Metered)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("a stream chunk is not a JSON object") from None
