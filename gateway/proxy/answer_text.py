"""The output of an answer, as text, once per wire format: what the gateway counts (~4 bytes a token)
as the completion of a 200 answer that came without usage it can bill.

The answer is read in the client's format (the endpoint's): chat choices' messages (content,
refusal, tool calls), completions' texts, a Response's output items, a Message's content blocks;
an embedding has no output. Only the generated part counts: a Response repeats its request's
`instructions` and `tools`, which are the prompt's. An answer that cannot be read this way is
counted whole. The views these answers are read through (`Counted...`) are declared with their
wire formats in gateway.schemas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from gateway.providers.base import Endpoint
from gateway.schemas.anthropic import CountedMessage
from gateway.schemas.openai import CountedChoices
from gateway.schemas.responses import CountedResponse


def _choices_texts(body: bytes) -> Iterator[Any]:
    for choice in msgspec.json.decode(body, type=CountedChoices).choices or ():
        yield choice.text
        message = choice.message
        if message is None:
            continue
        yield message.content
        yield message.refusal
        yield message.reasoning_content
        for call in message.tool_calls or ():
            if call.function is not None:
                yield call.function.name
                yield call.function.arguments


def _response_texts(body: bytes) -> Iterator[Any]:
    for item in msgspec.json.decode(body, type=CountedResponse).output or ():
        for part in (*(item.content or ()), *(item.summary or ())):
            yield part.text
            yield part.refusal
        yield item.name
        yield item.arguments


def _message_texts(body: bytes) -> Iterator[Any]:
    for block in msgspec.json.decode(body, type=CountedMessage).content or ():
        yield block.text
        yield block.thinking
        yield block.name
        if block.input is not None:
            yield msgspec.json.encode(block.input).decode()


_TEXTS: dict[Endpoint, Callable[[bytes], Iterator[Any]]] = {
    Endpoint.CHAT: _choices_texts,
    Endpoint.COMPLETIONS: _choices_texts,
    Endpoint.RESPONSES: _response_texts,
    Endpoint.MESSAGES: _message_texts,
}


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, list):  # content given as parts
        texts = (part.get("text") for part in value if isinstance(part, dict))
        return sum(len(text.encode()) for text in texts if isinstance(text, str))
    return 0


def answer_bytes(endpoint: Endpoint, body: bytes) -> int:
    """UTF-8 bytes of the output text in `body`, an answer on `endpoint` in its own wire format."""
    if endpoint is Endpoint.EMBEDDINGS:
        return 0
    try:
        return sum(_size(text) for text in _TEXTS[endpoint](body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return len(body)
