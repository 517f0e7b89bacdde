"""`POST /v1/messages/count_tokens`, the pure parts: read the request, build the call to an Anthropic
deployment's own count_tokens, read its answer, or estimate the count where no provider counts.

An estimate is the gateway's guess (about 4 bytes of text a token, a flat count an image), and is
marked as one (`"estimated": true`): only Anthropic's tokenizer gives Anthropic's count.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.dialects.messages.betas import with_betas
from gateway.errors import InvalidRequest
from gateway.providers.anthropic.adapter import anthropic_headers
from gateway.providers.base import UpstreamRequest, estimated_tokens
from gateway.providers.errors import bad_response
from gateway.providers.usage_bounds import UntrustedUsage, reported_count
from gateway.schemas.anthropic import ContentBlock, CountTokensRequest, UpstreamTokenCount
from gateway.schemas.nesting import TOO_DEEP, too_deep
from gateway.settings import Provider

MESSAGE_OVERHEAD = 4  # tokens a message costs for its role and framing
IMAGE_TOKENS = 1_600  # what Anthropic charges an image of about a megapixel, its usual cap
_DECODER = msgspec.json.Decoder(dict[str, Any])
_AT_PATH = re.compile(r" - at `\$\.?(.*)`$")
_MISSING = re.compile(r"missing required field `(\w+)`$")


def read_count_request(raw: bytes) -> tuple[dict[str, Any], CountTokensRequest, Any]:
    """(the body to forward, its typed view, the `gateway` directives object) of a client's body."""
    try:
        body = _DECODER.decode(raw)
    except msgspec.ValidationError:
        raise InvalidRequest("The request body must be a JSON object") from None
    except msgspec.DecodeError:
        raise InvalidRequest("The request body is not valid JSON") from None
    except RecursionError:  # msgspec's guard: thousands of levels
        raise InvalidRequest(TOO_DEEP) from None
    if too_deep(body, raw):
        raise InvalidRequest(TOO_DEEP)
    directives = body.pop("gateway", None)
    try:
        typed = msgspec.convert(body, CountTokensRequest)
    except msgspec.ValidationError as exc:
        found = _AT_PATH.search(str(exc)) or _MISSING.search(str(exc))
        raise InvalidRequest(_AT_PATH.sub("", str(exc)), param=found.group(1) if found else None) from None
    if not typed.model:
        raise InvalidRequest("model must not be empty", param="model")
    return body, typed, directives


def count_request(
    body: dict[str, Any],
    provider: Provider,
    upstream_model: str,
    base_url: str,
    client_betas: str | None = None,
) -> UpstreamRequest:
    """A deployment's own count_tokens call, for the body the client sent (its model replaced),
    with the client's `anthropic-beta` values the provider allows."""
    headers = with_betas(anthropic_headers(provider), client_betas, provider)
    return UpstreamRequest(
        url=f"{base_url.rstrip('/')}/v1/messages/count_tokens",
        headers={"content-type": "application/json", **headers},
        content=msgspec.json.encode({**body, "model": upstream_model}),
    )


def counted_tokens(body: bytes) -> int:
    """The count in an Anthropic count_tokens answer; a count that cannot be true is a bad answer."""
    try:
        counted = msgspec.json.decode(body, type=UpstreamTokenCount)
        if counted.input_tokens is None:
            raise bad_response("a token count without input_tokens")
        return reported_count(counted.input_tokens, "input_tokens")
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("not a token count") from None
    except UntrustedUsage as exc:
        raise bad_response(str(exc)) from None


def estimate_tokens(request: CountTokensRequest) -> int:
    """The gateway's guess at the prompt's tokens: its text at ~4 bytes a token, plus framing."""
    texts: list[str] = []
    images = 0
    if isinstance(request.system, str):
        texts.append(request.system)
    elif request.system:
        for block in request.system:
            images += _block_text(block, texts)
    for message in request.messages:
        if isinstance(message.content, str):
            texts.append(message.content)
            continue
        for block in message.content:
            images += _block_text(block, texts)
    for tool in request.tools or ():
        texts.append(msgspec.json.encode(tool).decode())
    text_bytes = sum(len(text.encode()) for text in texts)
    return estimated_tokens(text_bytes) + MESSAGE_OVERHEAD * len(request.messages) + IMAGE_TOKENS * images


def _block_text(block: ContentBlock, texts: list[str]) -> int:
    """Add a block's text to `texts`; return the images it holds."""
    for text in (block.text, block.thinking):
        if text:
            texts.append(text)
    if block.input is not None:
        texts.append(msgspec.json.encode(block.input).decode())
    if isinstance(block.content, str):
        texts.append(block.content)
    images = 1 if block.type == "image" else 0
    for inner in block.content if isinstance(block.content, list) else ():
        images += _block_text(inner, texts)
    return images
