"""The Anthropic Messages API wire format, as far as the gateway writes and reads it."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# --- request ----------------------------------------------------------------------------------


class CacheControl(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["ephemeral"]
    ttl: str | None = None


class TextBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag="text", tag_field="type"):
    text: str
    cache_control: CacheControl | None = None


class Base64Source(msgspec.Struct, frozen=True, tag="base64", tag_field="type"):
    media_type: str
    data: str


class UrlSource(msgspec.Struct, frozen=True, tag="url", tag_field="type"):
    url: str


class ImageBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag="image", tag_field="type"):
    source: Base64Source | UrlSource
    cache_control: CacheControl | None = None


class ToolUseBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock]
    cache_control: CacheControl | None = None


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock


class Message(msgspec.Struct, frozen=True):
    role: Literal["user", "assistant"]
    content: list[Block]


class ToolDefinition(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    cache_control: CacheControl | None = None


class ToolChoice(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class RequestMetadata(msgspec.Struct, frozen=True):
    user_id: str


class MessagesRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    max_tokens: int
    messages: list[Message]
    system: list[TextBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: list[str] | None = None
    metadata: RequestMetadata | None = None
    stream: bool | None = None


# --- response and stream events ---------------------------------------------------------------


# A count is decoded as whatever JSON value the upstream sent, and judged by
# `gateway.providers.usage_bounds` (a wrong type makes the usage untrusted, not the answer unreadable).
Count = Any


class Usage(msgspec.Struct, frozen=True):
    input_tokens: Count = None
    output_tokens: Count = None
    cache_read_input_tokens: Count = None
    cache_creation_input_tokens: Count = None


class ResponseBlock(msgspec.Struct, frozen=True):
    """Any content block; kinds the gateway does not translate (thinking...) are skipped."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class ErrorObject(msgspec.Struct, frozen=True):
    type: str | None = None
    message: str | None = None


class MessagesResponse(msgspec.Struct, frozen=True):
    type: str = "message"
    id: str = ""
    model: str = ""
    content: list[ResponseBlock] = []
    stop_reason: str | None = None
    usage: Usage | None = None
    error: ErrorObject | None = None


class Delta(msgspec.Struct, frozen=True):
    """A content_block_delta's delta (text_delta, input_json_delta...) or a message_delta's."""

    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class StreamEvent(msgspec.Struct, frozen=True):
    """One SSE event's data; which fields are set depends on `type`."""

    type: str
    message: MessagesResponse | None = None
    index: int | None = None
    content_block: ResponseBlock | None = None
    delta: Delta | None = None
    usage: Usage | None = None
    error: ErrorObject | None = None
