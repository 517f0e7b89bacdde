"""Anthropic's Messages API as the gateway's clients speak it (`POST /v1/messages`), as msgspec Structs.

The request side is read as far as the gateway needs it: to validate, to route and meter, and to
translate for providers that only speak OpenAI's chat API. Unknown fields are tolerated (and
forwarded untouched to Anthropic-kind providers). A content block is one flat Struct rather than a
tagged union, so that block types the gateway does not model (documents, server tool results...)
still parse and reach Anthropic; the translation refuses them by name where it cannot express them.

The reply side (a Message, the stream events) is what the gateway writes when it translates; the
last section is the lenient view of the same objects that it reads from an Anthropic upstream.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from gateway.errors import ErrorDetail
from gateway.schemas.openai import Count, MaxTokens, ModelName

# --- requests ---------------------------------------------------------------------------------

CacheControl = dict[str, Any]  # {"type": "ephemeral", "ttl": "5m" | "1h"}, checked where it is read


class BlockSource(msgspec.Struct, frozen=True, omit_defaults=True):
    """An image's (or document's) source: base64 data, a URL, a file id or inline text."""

    type: str
    media_type: str | None = None
    data: Any = None
    url: str | None = None
    file_id: str | None = None


class ContentBlock(msgspec.Struct, frozen=True, omit_defaults=True):
    """Any content block; which fields are set depends on `type`.

    text: `text` | image / document: `source` | tool_use: `id`, `name`, `input` |
    tool_result: `tool_use_id`, `content`, `is_error` | thinking: `thinking`, `signature` |
    redacted_thinking: `data` | tool_reference (in a tool_result): `tool_name` |
    tool_addition / tool_removal (in a system turn): `tool`.
    """

    type: str
    text: str | None = None
    source: BlockSource | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    cache_control: CacheControl | None = None
    tool_name: str | None = None
    tool: Any = None


class TurnOutputConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    """A system turn's per-turn output settings (its `effort`); `format` stays top-level only."""

    effort: str | None = None


class InputMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A turn. Besides user and assistant turns, Anthropic's current API takes `system` turns
    inside `messages` (text, or tool_addition / tool_removal blocks under a beta), each with its
    own `output_config` and `clear_at` (`next_user_message`: shown only until a later user turn;
    `never`, the default: always shown)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock] = ""
    clear_at: str | None = None  # system turns only
    output_config: TurnOutputConfig | None = None  # system turns only


class ToolDefinition(msgspec.Struct, frozen=True, omit_defaults=True):
    """A client tool (`type` absent or "custom", with `input_schema`) or a server tool (a versioned
    `type` such as "web_search_20250305", run by Anthropic)."""

    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: CacheControl | None = None
    defer_loading: bool | None = None  # offered only once a tool search (or a tool_addition) names it


class ToolChoice(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class RequestMetadata(msgspec.Struct, frozen=True, omit_defaults=True):
    user_id: str | None = None


class ThinkingConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str  # "enabled", "disabled", "adaptive"
    budget_tokens: int | None = None


class ContextEdit(msgspec.Struct, frozen=True):
    """One of `context_management.edits`, read for its `type` (`clear_thinking_20251015`,
    `clear_tool_uses_20250919`, `compact_20260112`...); its other fields are Anthropic's to read."""

    type: str


class ContextManagement(msgspec.Struct, frozen=True, omit_defaults=True):
    edits: list[ContextEdit] = []


class OutputFormat(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str  # "json_schema"
    schema: dict[str, Any] | None = None


class OutputConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    effort: str | None = None
    format: OutputFormat | None = None


NonEmptyMessages = Annotated[list[InputMessage], Meta(min_length=1)]


class MessagesRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    """`POST /v1/messages`: `model` is one of the gateway's aliases; `max_tokens` is required."""

    model: ModelName
    max_tokens: MaxTokens
    messages: NonEmptyMessages
    system: str | list[ContentBlock] | None = None
    stream: bool | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    metadata: RequestMetadata | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # Anthropic's; another value is a 400
    cache_control: CacheControl | None = None  # automatic caching: a breakpoint on the last block
    context_management: ContextManagement | None = None


class CountTokensRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    """`POST /v1/messages/count_tokens`: the prompt of a Messages request, without its sampling."""

    model: ModelName
    messages: NonEmptyMessages
    system: str | list[ContentBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: CacheControl | None = None


# --- replies ----------------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class MessageUsage(msgspec.Struct, kw_only=True):
    """Anthropic's counts: `input_tokens` excludes the cache reads and writes; `cost` is the
    gateway's exact price of the request (USD, a decimal string), absent without one."""

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    cost: str | UnsetType = UNSET


class TextOut(msgspec.Struct, kw_only=True, tag="text", tag_field="type"):
    text: str


class ToolUseOut(msgspec.Struct, kw_only=True, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


OutputBlock = TextOut | ToolUseOut


class MessageOut(msgspec.Struct, kw_only=True, omit_defaults=False):
    id: str
    type: str = "message"
    role: str = "assistant"
    model: str
    content: list[OutputBlock]
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: MessageUsage


class TokenCount(msgspec.Struct, kw_only=True):
    """count_tokens' answer; `estimated` is set (true) only when the gateway guessed the count."""

    input_tokens: int
    estimated: bool | UnsetType = UNSET


class ErrorEnvelope(msgspec.Struct):
    """Every error of the Messages API, answered or sent in a stream as an `error` event:
    `error.type` in Anthropic's words (gateway.dialects.messages.errors), `error.message`, and the
    gateway's own `param` and `code` beside them."""

    error: ErrorDetail
    type: str = "error"


# --- stream events (what a translated stream sends) ---------------------------------------------


class MessageStart(msgspec.Struct, kw_only=True, tag="message_start", tag_field="type"):
    message: MessageOut


class ContentBlockStart(msgspec.Struct, kw_only=True, tag="content_block_start", tag_field="type"):
    index: int
    content_block: OutputBlock


class TextDelta(msgspec.Struct, kw_only=True, tag="text_delta", tag_field="type"):
    text: str


class InputJsonDelta(msgspec.Struct, kw_only=True, tag="input_json_delta", tag_field="type"):
    partial_json: str


class ContentBlockDelta(msgspec.Struct, kw_only=True, tag="content_block_delta", tag_field="type"):
    index: int
    delta: TextDelta | InputJsonDelta


class ContentBlockStop(msgspec.Struct, kw_only=True, tag="content_block_stop", tag_field="type"):
    index: int


class MessageDeltaBody(msgspec.Struct, kw_only=True, omit_defaults=False):
    stop_reason: StopReason
    stop_sequence: str | None = None


class MessageDelta(msgspec.Struct, kw_only=True, tag="message_delta", tag_field="type"):
    delta: MessageDeltaBody
    usage: MessageUsage  # cumulative: the whole message's counts


class MessageStop(msgspec.Struct, kw_only=True, tag="message_stop", tag_field="type"):
    pass


class Ping(msgspec.Struct, kw_only=True, tag="ping", tag_field="type"):
    pass


StreamEvent = (
    MessageStart
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | Ping
)


# --- what the gateway reads from an Anthropic upstream -------------------------------------------
# The same objects as the replies above, read as leniently as they must be: a count is whatever JSON
# value came, block and event types the gateway does not translate (thinking, server tools, types
# added later) parse rather than fail, and only the fields the gateway reads are decoded. The reply
# Structs above are strict and tagged: they are what the gateway writes and documents (OpenAPI).


class UpstreamUsage(msgspec.Struct, frozen=True):
    input_tokens: Count = None
    output_tokens: Count = None
    cache_read_input_tokens: Count = None
    cache_creation_input_tokens: Count = None
    service_tier: Any = None  # the tier that served it: standard, priority or batch (a string)


class UpstreamBlock(msgspec.Struct, frozen=True):
    """Any content block; kinds the gateway does not translate (thinking...) are skipped."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class UpstreamErrorObject(msgspec.Struct, frozen=True):
    type: str | None = None
    message: str | None = None


class UpstreamMessage(msgspec.Struct, frozen=True):
    type: str = "message"
    id: str = ""
    model: str = ""
    content: list[UpstreamBlock] = []
    stop_reason: str | None = None
    usage: UpstreamUsage | None = None
    error: UpstreamErrorObject | None = None


class UpstreamErrorEnvelope(msgspec.Struct, frozen=True):
    """An error body (`{"type": "error", "error": {...}}`)."""

    error: UpstreamErrorObject | None = None


class UpstreamEventType(msgspec.Struct, frozen=True):
    """An event read for its type alone: deliberately partial, since a pass-through stream reads no
    more of most events (their text deltas), and decoding them whole would cost it on each."""

    type: str = ""


class UpstreamTokenCount(msgspec.Struct, frozen=True):
    """count_tokens' answer from an Anthropic deployment (TokenCount is the gateway's own)."""

    input_tokens: Count = None


class UpstreamDelta(msgspec.Struct, frozen=True):
    """A content_block_delta's delta (text_delta, input_json_delta...) or a message_delta's."""

    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class UpstreamEvent(msgspec.Struct, frozen=True):
    """One SSE event's data; which fields are set depends on `type`."""

    type: str
    message: UpstreamMessage | None = None
    index: int | None = None
    content_block: UpstreamBlock | None = None
    delta: UpstreamDelta | None = None
    usage: UpstreamUsage | None = None
    error: UpstreamErrorObject | None = None


# A Message as the gateway counts its output text (gateway.proxy.answer_text), when it came without
# usage.
# Every field optional and typed Any: the answer was already served to the client as it came, and
# counting it must not fail on a field some server spells its own way (content as a list of parts).


class CountedBlock(msgspec.Struct):
    text: Any = None
    thinking: Any = None
    name: Any = None  # a tool_use block
    input: Any = None


class CountedMessage(msgspec.Struct):
    content: list[CountedBlock] | None = None
