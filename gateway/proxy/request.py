"""Parse an OpenAI-endpoint request body once: a dict to forward, a typed view to validate and read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.providers.base import Endpoint
from gateway.schemas.openai import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

_TYPED: dict[Endpoint, type[msgspec.Struct]] = {
    Endpoint.CHAT: ChatCompletionRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
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


_RETENTIONS = {"in-memory": "in_memory", "in_memory": "in_memory", "24h": "24h"}


def _retention(value: str) -> str:
    """OpenAI spells it `in_memory` or `24h`; `in-memory` is accepted as a common variant."""
    try:
        return _RETENTIONS[value]
    except KeyError:
        raise InvalidRequest(
            "prompt_cache_retention must be 'in_memory' or '24h'", param="prompt_cache_retention"
        ) from None


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
        raise InvalidRequest("The request body is nested too deeply") from None
    gateway_object = body.pop("gateway", None)
    try:
        typed = msgspec.convert(body, _TYPED[endpoint])
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _AT_PATH.search(message)
        param = match.group(1) if match else None
        raise InvalidRequest(
            _AT_PATH.sub("", message) + (f" at '{param}'" if param else ""), param=param
        ) from None
    chat = typed if isinstance(typed, ChatCompletionRequest) else None
    if chat is not None:
        if not chat.messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        if len(chat.messages) > max_messages:
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
    return ParsedRequest(
        endpoint=endpoint,
        body=body,
        model=model,
        stream=stream,
        client_wants_usage=bool(stream_options is not None and stream_options.include_usage),
        gateway_object=gateway_object,
        chat=chat,
        prompt_cache_key=chat.prompt_cache_key if chat is not None else None,
    )
