"""Parse an OpenAI-endpoint request body once: a dict to forward, a typed view to validate and read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.errors import InvalidRequest, schema_error_code
from gateway.providers.base import Endpoint
from gateway.proxy.prompt_text import PromptSize, prompt_size
from gateway.schemas.anthropic import MessagesRequest
from gateway.schemas.nesting import TOO_DEEP, too_deep
from gateway.schemas.openai import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from gateway.schemas.responses import ResponsesRequest

_TYPED: dict[Endpoint, type[msgspec.Struct]] = {
    Endpoint.CHAT: ChatCompletionRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
    Endpoint.RESPONSES: ResponsesRequest,
    Endpoint.MESSAGES: MessagesRequest,
}
_DECODER = msgspec.json.Decoder(dict[str, Any])
_AT_PATH = re.compile(r" - at `\$\.?(.*)`$")


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """The request as parsed, read everywhere on its way and never changed."""

    endpoint: Endpoint
    body: dict[str, Any]  # the client's body minus the `gateway` object
    model: str
    stream: bool
    client_wants_usage: bool
    gateway_object: Any
    chat: ChatCompletionRequest | None
    prompt_cache_key: str | None
    typed: msgspec.Struct  # the typed view of the body: one of _TYPED's Structs
    # The output a choice may produce: max_completion_tokens, else max_tokens (None: neither set;
    # 0 for embeddings), and the choices asked for (n)
    max_output_tokens: int | None = None
    choices: int = 1
    # the service tier asked for, in OpenAI's terms (a Messages request's `standard_only` is
    # `default`); None: none asked for (gateway.metering.pricing.Tariff.tier)
    service_tier: str | None = None

    def prompt_size(self) -> PromptSize:
        """The prompt's size, read from its text (gateway.proxy.prompt_text). Counted when asked,
        by a request metered without upstream counts, never on the way of one that has them."""
        return prompt_size(self.typed)


_RETENTIONS = {"in-memory": "in_memory", "in_memory": "in_memory", "24h": "24h"}


def _retention(value: str) -> str:
    """OpenAI spells it `in_memory` or `24h`; `in-memory` is accepted as a common variant."""
    try:
        return _RETENTIONS[value]
    except KeyError:
        raise InvalidRequest(
            "prompt_cache_retention must be 'in_memory' or '24h'", param="prompt_cache_retention"
        ) from None


MAX_OUTPUT_TOKENS = 2**31 - 1  # OpenAI's own bound on max_tokens
MAX_CHOICES = 128  # and on n


def _bounded(value: int | None, param: str, low: int, high: int) -> int | None:
    if value is not None and not low <= value <= high:
        raise InvalidRequest(f"{param} must be an integer from {low} to {high}, not {value}", param=param)
    return value


def _output_limits(typed: msgspec.Struct) -> tuple[int | None, int]:
    """(max output tokens a choice, choices): a field sent as null is unset, like one left out."""
    if isinstance(typed, EmbeddingRequest):
        return 0, 1
    if isinstance(typed, ResponsesRequest):
        return _bounded(typed.max_output_tokens, "max_output_tokens", 0, MAX_OUTPUT_TOKENS), 1
    max_tokens = _bounded(getattr(typed, "max_tokens", None), "max_tokens", 0, MAX_OUTPUT_TOKENS)
    max_completion = getattr(typed, "max_completion_tokens", None)
    max_completion = _bounded(max_completion, "max_completion_tokens", 0, MAX_OUTPUT_TOKENS)
    choices = _bounded(getattr(typed, "n", None), "n", 1, MAX_CHOICES)
    return (max_tokens if max_completion is None else max_completion), choices or 1


def _requested_tier(typed: msgspec.Struct) -> str | None:
    tier: str | None = getattr(typed, "service_tier", None)
    return "default" if tier == "standard_only" else tier


def parse_request(raw: bytes, endpoint: Endpoint, max_messages: int) -> ParsedRequest:
    if not raw:
        raise InvalidRequest("The request body is empty; expected a JSON object")
    try:
        body = _DECODER.decode(raw)
    except msgspec.ValidationError:
        raise InvalidRequest("The request body must be a JSON object") from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:  # msgspec's guard against a stack overflow: `[[[[...` a few KB deep
        raise InvalidRequest(TOO_DEEP) from None
    if too_deep(body, raw):  # later steps re-encode parts of the body, some recursively
        raise InvalidRequest(TOO_DEEP)
    gateway_object = body.pop("gateway", None)
    if endpoint is Endpoint.MESSAGES and body.get("max_tokens") is None:  # Anthropic requires it
        raise InvalidRequest("max_tokens is required", param="max_tokens")
    try:
        typed = msgspec.convert(body, _TYPED[endpoint])
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _AT_PATH.search(message)
        param = match.group(1) if match else None
        raise InvalidRequest(
            _AT_PATH.sub("", message) + (f" at '{param}'" if param else ""),
            param=param,
            code=schema_error_code(message),
        ) from None
    chat = typed if isinstance(typed, ChatCompletionRequest) else None
    if chat is not None:
        if not chat.messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        if len(chat.messages) > max_messages:
            raise InvalidRequest(f"At most {max_messages} messages are accepted", param="messages")
    if isinstance(typed, MessagesRequest) and len(typed.messages) > max_messages:
        raise InvalidRequest(f"At most {max_messages} messages are accepted", param="messages")
    if chat is not None and chat.prompt_cache_retention is not None:
        body["prompt_cache_retention"] = _retention(chat.prompt_cache_retention)
    stream = bool(getattr(typed, "stream", None))
    stream_options = getattr(typed, "stream_options", None)
    if stream_options is not None and not stream:
        raise InvalidRequest("stream_options is only allowed when stream is true", param="stream_options")
    model = typed.model  # type: ignore[attr-defined]
    if not model:
        raise InvalidRequest("model must not be empty", param="model")
    max_output_tokens, choices = _output_limits(typed)
    return ParsedRequest(
        endpoint=endpoint,
        body=body,
        model=model,
        stream=stream,
        client_wants_usage=bool(stream_options is not None and stream_options.include_usage),
        gateway_object=gateway_object,
        chat=chat,
        prompt_cache_key=getattr(typed, "prompt_cache_key", None),
        typed=typed,
        max_output_tokens=max_output_tokens,
        choices=choices,
        service_tier=_requested_tier(typed),
    )
