"""OpenAI's Responses API as msgspec Structs: the request as far as the gateway reads it, and the
Response object and stream events as far as the gateway produces them (translating from chat).

Unknown request fields are ignored here and forwarded untouched to upstreams that serve the
Responses API themselves. Output items, content parts and stream events are tagged by `type`,
so that each encodes its own `type` and the JSON Schema of a union stays exact.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from gateway.schemas.openai import CacheControl, CacheRetention, Count, MaxTokens, ModelName, ServiceTier

# --- requests ---------------------------------------------------------------------------------


class InputPart(msgspec.Struct, frozen=True, omit_defaults=True):
    """A content part of an input message: input_text, input_image, input_file, or (in a message
    the client sends back from an earlier answer) output_text and refusal."""

    type: str
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: str | None = None
    refusal: str | None = None
    cache_control: CacheControl | None = None  # the Anthropic convention, as on chat content parts


class InputItem(msgspec.Struct, frozen=True, omit_defaults=True):
    """One item of `input`: a message (whose `type` may be left out), a function_call the model
    made, a function_call_output the client answers it with, or another item type."""

    type: str | None = None
    role: str | None = None
    content: str | list[InputPart] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[InputPart] | None = None
    namespace: str | None = None  # of a function_call: the namespace tool its function belongs to
    id: str | None = None
    status: str | None = None
    cache_control: CacheControl | None = None


class ResponsesTool(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool: `function` (flat, unlike chat's), `namespace` (a named group of function tools,
    called by the function's name with the group's as `namespace`) or a built-in one (web_search,
    file_search...)."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[ResponsesTool] | None = None  # a namespace's own
    external_web_access: bool | None = None  # web_search: false allows cached results only
    cache_control: CacheControl | None = None


class TextFormat(msgspec.Struct, frozen=True, omit_defaults=True):
    """`text.format`: text, json_object, or json_schema with its schema inline."""

    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    format: TextFormat | None = None
    verbosity: str | None = None


class ReasoningOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: ModelName
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    stream: bool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: CacheRetention | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None  # a stored prompt template, by id
    background: bool | None = None
    metadata: dict[str, str] | None = None
    client_metadata: dict[str, Any] | None = None  # what the client says of itself (Codex CLI: its ids)
    user: str | None = None
    safety_identifier: str | None = None
    truncation: str | None = None
    service_tier: ServiceTier | None = None


# --- the Response object ----------------------------------------------------------------------

ResponseStatus = Literal["completed", "incomplete", "in_progress", "failed"]


class OutputText(msgspec.Struct, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class Refusal(msgspec.Struct, kw_only=True, tag_field="type", tag="refusal"):
    refusal: str


OutputContent = OutputText | Refusal


class OutputMessage(msgspec.Struct, kw_only=True, tag_field="type", tag="message"):
    id: str
    status: ResponseStatus
    role: str = "assistant"
    content: list[OutputContent]


class FunctionCallItem(msgspec.Struct, kw_only=True, tag_field="type", tag="function_call"):
    id: str
    status: ResponseStatus
    call_id: str
    name: str
    arguments: str
    namespace: str | UnsetType = UNSET  # the namespace tool `name` belongs to, if any


OutputItem = OutputMessage | FunctionCallItem


class InputTokensDetails(msgspec.Struct):
    """Also a Batch's usage's (gateway.schemas.batch_api), which has no cache writes to report."""

    cached_tokens: int = 0
    cache_write_tokens: int | UnsetType = UNSET


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int
    cost: str | UnsetType = UNSET  # USD, a decimal string: the gateway's own field, as on chat usage


# What the gateway reads of an upstream's usage: the same object as ResponseUsage, read leniently.
# A count is judged by `gateway.providers.usage_bounds`: a wrong type makes the usage untrusted,
# not the answer unreadable; ResponseUsage is what the gateway writes and documents (OpenAPI).


class UpstreamInputDetails(msgspec.Struct):
    cached_tokens: Count = None
    cache_write_tokens: Count = None


class UpstreamResponseUsage(msgspec.Struct):
    input_tokens: Count = None
    output_tokens: Count = None
    input_tokens_details: UpstreamInputDetails | None = None


# A Response as the gateway counts its output text (gateway.proxy.answer_text), when it came without
# usage: only the generated parts (not the instructions and tools it repeats back).
# Every field optional and typed Any: the answer was already served to the client as it came, and
# counting it must not fail on a field some server spells its own way (content as a list of parts).


class CountedPart(msgspec.Struct):
    text: Any = None
    refusal: Any = None


class CountedOutputItem(msgspec.Struct):
    content: list[CountedPart] | None = None  # a message
    summary: list[CountedPart] | None = None  # a reasoning item
    name: Any = None  # a function call
    arguments: Any = None


class CountedResponse(msgspec.Struct):
    output: list[CountedOutputItem] | None = None


class IncompleteDetails(msgspec.Struct, kw_only=True):
    reason: Literal["max_output_tokens", "content_filter"]


class FunctionToolEcho(msgspec.Struct, kw_only=True, tag_field="type", tag="function"):
    """A function tool as a Response repeats it back."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool = False


class NamespaceToolEcho(msgspec.Struct, kw_only=True, tag_field="type", tag="namespace"):
    """A namespace tool as a Response repeats it back."""

    name: str
    description: str = ""
    tools: list[FunctionToolEcho]


ToolEcho = FunctionToolEcho | NamespaceToolEcho


class TextFormatEcho(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextEcho(msgspec.Struct, kw_only=True):
    format: TextFormatEcho


class ReasoningEcho(msgspec.Struct, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class Response(msgspec.Struct, kw_only=True):
    """A Response the gateway made from a chat completion; fields the request set are repeated."""

    id: str
    object: str = "response"
    created_at: int
    status: ResponseStatus
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningEcho = msgspec.field(default_factory=ReasoningEcho)
    store: bool = False  # kept for the team (gateway.dialects.responses.store); the request's, true if absent
    temperature: float | None = None
    text: TextEcho = msgspec.field(default_factory=lambda: TextEcho(format=TextFormatEcho(type="text")))
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[ToolEcho] = []
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | UnsetType = UNSET  # left out until known, and when not believed
    user: str | UnsetType = UNSET  # left out when the request had none (a string or absent)
    metadata: dict[str, str] = {}


# --- stored Responses (gateway.responses_store) ------------------------------------------------


class ResponseDeleted(msgspec.Struct, kw_only=True):
    """The answer to DELETE /v1/responses/{id}."""

    id: str
    object: str = "response"
    deleted: bool = True


class InputItemList(msgspec.Struct, kw_only=True):
    """A page of a stored Response's input items (GET /v1/responses/{id}/input_items)."""

    object: str = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class InputTokens(msgspec.Struct, kw_only=True):
    """The answer to POST /v1/responses/input_tokens."""

    object: str = "response.input_tokens"
    input_tokens: int


# --- stream events ----------------------------------------------------------------------------


class UpstreamEventHead(msgspec.Struct):
    """An upstream's event read for its type (and an `error` event's message) alone: deliberately
    partial, since the pass-through reads no more of most events (their text deltas), and decoding
    them whole would cost it on each."""

    type: str = ""
    message: str | None = None  # of an `error` event


# Every event carries `sequence_number`, counted from 0 in the order the events are sent.


class _Event(msgspec.Struct, kw_only=True, tag_field="type"):
    sequence_number: int


class ResponseCreated(_Event, tag="response.created"):
    response: Response


class ResponseInProgress(_Event, tag="response.in_progress"):
    response: Response


class ResponseCompleted(_Event, tag="response.completed"):
    response: Response


class ResponseIncomplete(_Event, tag="response.incomplete"):
    response: Response


class OutputItemAdded(_Event, tag="response.output_item.added"):
    output_index: int
    item: OutputItem


class OutputItemDone(_Event, tag="response.output_item.done"):
    output_index: int
    item: OutputItem


class ContentPartAdded(_Event, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputContent


class ContentPartDone(_Event, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputContent


class OutputTextDelta(_Event, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = []


class OutputTextDone(_Event, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = []


class RefusalDelta(_Event, tag="response.refusal.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class RefusalDone(_Event, tag="response.refusal.done"):
    item_id: str
    output_index: int
    content_index: int
    refusal: str


class FunctionCallArgumentsDelta(_Event, tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(_Event, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    name: str
    arguments: str


StreamEvent = (
    ResponseCreated
    | ResponseInProgress
    | ResponseCompleted
    | ResponseIncomplete
    | OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | RefusalDelta
    | RefusalDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
)
