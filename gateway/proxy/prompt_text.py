"""The prompt of a request, as text, once per wire format: what the gateway counts (~4 bytes a token)
when it has no upstream counts to bill (a stream the client left, an answer without usage, counts
it does not believe).

A prompt is every part of the request a model reads before it answers: its messages or input in
every content form (a string, text parts or blocks, tool calls and tool results), its system
prompt or instructions, and its tool and output-schema definitions (as the JSON they are sent as).
Images, audio and files are not counted: their tokens follow the model and the picture, not their
bytes. Token ids (completions, embeddings) count as the tokens they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.providers.base import estimated_tokens
from gateway.schemas.anthropic import ContentBlock, MessagesRequest
from gateway.schemas.openai import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from gateway.schemas.responses import InputItem, InputPart, ResponsesRequest


@dataclass(frozen=True, slots=True)
class PromptSize:
    """How big a prompt is: UTF-8 bytes of text, plus tokens the client sent as token ids."""

    text_bytes: int = 0
    token_ids: int = 0

    @property
    def tokens(self) -> int:
        return estimated_tokens(self.text_bytes) + self.token_ids


def _bytes(texts: Iterable[str | None]) -> int:
    return sum(len(text.encode()) for text in texts if text)


def _json(value: Any) -> str | None:
    """A definition as the JSON it is sent as (a tool, a schema), for its size."""
    return None if value is None else msgspec.json.encode(value).decode()


# --- chat completions -------------------------------------------------------------------------


def _chat_texts(request: ChatCompletionRequest) -> Iterator[str | None]:
    for message in request.messages:
        if isinstance(message.content, str):
            yield message.content
        else:
            yield from (part.text for part in message.content or ())
        yield message.name
        for call in message.tool_calls or ():
            yield call.function.name
            yield call.function.arguments
    for tool in request.tools or ():
        yield _json(tool.function)
    yield _json(request.response_format)


def chat_prompt(request: ChatCompletionRequest) -> PromptSize:
    return PromptSize(_bytes(_chat_texts(request)))


# --- legacy completions and embeddings: a string, or a list of strings and token ids ------------


def _text_list(value: str | list[Any] | None) -> PromptSize:
    if value is None or isinstance(value, str):
        return PromptSize(_bytes([value]))
    texts = [item for item in value if isinstance(item, str)]
    ids = sum(1 if isinstance(item, int) else len(item) for item in value if not isinstance(item, str))
    return PromptSize(_bytes(texts), ids)


def completion_prompt(request: CompletionRequest) -> PromptSize:
    return _text_list(request.prompt)


def embedding_input(request: EmbeddingRequest) -> PromptSize:
    return _text_list(request.input)


# --- the Responses API ------------------------------------------------------------------------


def _parts_texts(parts: str | list[InputPart] | None) -> Iterator[str | None]:
    if parts is None or isinstance(parts, str):
        yield parts
        return
    for part in parts:
        yield part.text
        yield part.refusal


def _item_texts(item: InputItem) -> Iterator[str | None]:
    """A message's content, a function call's name and arguments, a function call output's output."""
    yield from _parts_texts(item.content)
    yield item.name
    yield item.arguments
    yield from _parts_texts(item.output)


def _responses_texts(request: ResponsesRequest) -> Iterator[str | None]:
    yield request.instructions
    if isinstance(request.input, str):
        yield request.input
    else:
        for item in request.input or ():
            yield from _item_texts(item)
    for tool in request.tools or ():
        yield _json(tool)
    text_format = request.text.format if request.text is not None else None
    yield _json(text_format.schema if text_format is not None else None)


def responses_prompt(request: ResponsesRequest) -> PromptSize:
    """What the request itself carries: a `previous_response_id` or `conversation` a Responses
    upstream adds to it is that upstream's own state, unseen by the gateway."""
    return PromptSize(_bytes(_responses_texts(request)))


# --- Anthropic's Messages API -----------------------------------------------------------------


def _block_texts(blocks: str | list[ContentBlock] | None) -> Iterator[str | None]:
    """Text, thinking, a tool call's name and input, a tool result's content, a text document."""
    if blocks is None or isinstance(blocks, str):
        yield blocks
        return
    for block in blocks:
        yield block.text
        yield block.thinking
        yield block.name
        yield _json(block.input)
        yield from _block_texts(block.content)
        source = block.source
        if source is not None and source.type == "text" and isinstance(source.data, str):
            yield source.data


def _messages_texts(request: MessagesRequest) -> Iterator[str | None]:
    yield from _block_texts(request.system)
    for message in request.messages:
        yield from _block_texts(message.content)
    for tool in request.tools or ():
        yield tool.name
        yield tool.description
        yield _json(tool.input_schema)
    output_format = request.output_config.format if request.output_config is not None else None
    yield _json(output_format.schema if output_format is not None else None)


def messages_prompt(request: MessagesRequest) -> PromptSize:
    return PromptSize(_bytes(_messages_texts(request)))


_PROMPTS: dict[type[msgspec.Struct], Callable[[Any], PromptSize]] = {
    ChatCompletionRequest: chat_prompt,
    CompletionRequest: completion_prompt,
    EmbeddingRequest: embedding_input,
    ResponsesRequest: responses_prompt,
    MessagesRequest: messages_prompt,
}


def prompt_size(typed: msgspec.Struct) -> PromptSize:
    """The prompt of a request, from its typed view (gateway.proxy.request.ParsedRequest.typed)."""
    return _PROMPTS[type(typed)](typed)
