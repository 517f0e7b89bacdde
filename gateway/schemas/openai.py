"""The OpenAI wire format as msgspec Structs: the typed view of what clients send and receive.

Request bodies are decoded once into a dict (so every field the client sent can be forwarded
untouched) and then converted into these Structs to validate the fields the gateway reads. Replies
(completions, stream chunks, usage, errors) are the Structs the translations write and read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

# --- requests ---------------------------------------------------------------------------------

CacheControl = dict[str, Any]  # {"type": "ephemeral", "ttl": "5m" | "1h"}
# A prompt or embedding input given as a list: strings, token ids or token-id lists, never empty.
TokenIds = Annotated[list[int], Meta(min_length=1)]
TextList = Annotated[list[str | int | TokenIds], Meta(min_length=1)]
# The bounds `gateway.proxy.request` holds requests to, declared here so the OpenAPI document says them.
ModelName = Annotated[str, Meta(min_length=1)]  # an alias the gateway serves
MaxTokens = Annotated[int, Meta(ge=0, le=2**31 - 1)]  # OpenAI's own bound
Choices = Annotated[int, Meta(ge=1, le=128)]  # n, OpenAI's own bound
CacheRetention = Literal["in_memory", "in-memory", "24h"]  # `in-memory`: a common variant
# OpenAI's service tiers (gateway.settings.catalog.SERVICE_TIERS); another value is a 400
ServiceTier = Literal["auto", "default", "flex", "priority"]


class ContentPart(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str
    text: str | None = None
    image_url: Any = None
    input_audio: Any = None
    file: Any = None
    cache_control: CacheControl | None = None


class FunctionCall(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    arguments: str = ""


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    function: FunctionCall
    type: str = "function"


class ChatMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    cache_control: CacheControl | None = None


class FunctionDefinition(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str
    function: FunctionDefinition | None = None
    cache_control: CacheControl | None = None


class StreamOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    include_usage: bool | None = None


class ChatCompletionRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: ModelName
    messages: list[ChatMessage]  # never empty: gateway.proxy.request refuses it
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: Choices | None = None
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: CacheRetention | None = None
    service_tier: ServiceTier | None = None


class CompletionRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: ModelName
    prompt: str | TextList | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: MaxTokens | None = None
    n: Choices | None = None


class EmbeddingRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: ModelName
    input: str | TextList
    encoding_format: str | None = None
    dimensions: int | None = None


# --- replies: usage and errors -------------------------------------------------------------------

# A count is decoded as whatever JSON value the upstream sent, and judged by
# `gateway.providers.usage_bounds`: a count of the wrong type makes the usage untrusted, not the
# whole answer unreadable. The gateway writes ints.
Count = Any


class PromptTokensDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    cached_tokens: Count = None
    cache_write_tokens: Count = None


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A reply's usage, as read from an upstream and as the gateway writes it (with `cost`)."""

    prompt_tokens: Count = None
    completion_tokens: Count = None
    total_tokens: Count = None
    prompt_tokens_details: PromptTokensDetails | None = None
    # The gateway's exact cost, a decimal string (SPEC section 2); read as any value, since some
    # upstreams send a cost of their own (a number) that the gateway replaces.
    cost: Any = None


class ErrorObject(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class ErrorEnvelope(msgspec.Struct):
    error: ErrorObject | str | None = None


class MeteredReply(msgspec.Struct):
    """What the pass-through path reads of a chat completion, completion, embedding or stream chunk:
    usage, an error, the model it names; `choices` left undecoded. Deliberately partial: every
    answer passed through is read this way, and its choices (the text) are most of its bytes."""

    usage: Usage | None = None
    choices: list[msgspec.Raw] | None = None
    error: ErrorObject | str | None = None
    model: Any = None  # any JSON value: what the upstream named; replaced by the alias
    service_tier: Any = None  # the tier OpenAI served it at (a string), on answers and chunks


# --- replies: chat completions ----------------------------------------------------------------
# One declaration serves the translations that write these (Anthropic's answers in OpenAI terms)
# and those that read them (chat answers turned into Messages and Responses): fields only a reader
# needs default to UNSET, which is never written; readers accept what servers leave out.


class MessageToolCall(msgspec.Struct, kw_only=True):
    """A tool call in an answer. The request's `ToolCall` is the same object as a client sends it
    back; that one leaves `type` out when it is "function" because its encoding keys the prompt
    cache (`gateway.providers.cache_hints`), where an answer always carries it."""

    id: str | None = None
    type: str = "function"
    function: FunctionCall | None = None


class ResponseMessage(msgspec.Struct, kw_only=True):
    role: str = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[MessageToolCall] | UnsetType | None = UNSET


class Choice(msgspec.Struct, kw_only=True):
    index: int = 0
    message: ResponseMessage | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: Any = UNSET  # vLLM and SGLang: the stop string that ended the text


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str = ""
    object: str = "chat.completion"
    created: int | None = None
    model: Any = None  # any JSON value an upstream sent; the gateway writes the alias
    choices: list[Choice] = []
    usage: Usage | UnsetType | None = UNSET


# --- an answer as the gateway counts its text (gateway.proxy.answer_text) -----------------------
# A second view of chat completions and completions, read only to count their output when no usage
# came with them. Every field optional and typed Any: the answer was already served to the client
# as it came, and counting it must not fail on a field some server spells its own way (content as a
# list of parts).


class CountedFunction(msgspec.Struct):
    name: Any = None
    arguments: Any = None


class CountedToolCall(msgspec.Struct):
    function: CountedFunction | None = None


class CountedChatMessage(msgspec.Struct):
    content: Any = None
    refusal: Any = None
    reasoning_content: Any = None  # vLLM's and SGLang's reasoning parsers
    tool_calls: list[CountedToolCall] | None = None


class CountedChoice(msgspec.Struct):
    message: CountedChatMessage | None = None  # chat completions
    text: Any = None  # legacy completions


class CountedChoices(msgspec.Struct):
    choices: list[CountedChoice] | None = None


# --- replies: chat completion stream chunks ---------------------------------------------------


class FunctionDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, kw_only=True):
    index: int = 0
    id: str | UnsetType | None = UNSET
    type: str | UnsetType | None = UNSET
    function: FunctionDelta | UnsetType | None = UNSET


class ChunkDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(msgspec.Struct, kw_only=True):
    index: int = 0
    delta: ChunkDelta | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: Any = UNSET  # vLLM and SGLang: the stop string that ended the text


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    id: str | None = None
    object: str = "chat.completion.chunk"
    created: int | None = None
    model: Any = None  # any JSON value an upstream sent; the gateway writes the alias
    choices: list[ChunkChoice] = []
    usage: Usage | UnsetType | None = UNSET


class ChunkWithRawUsage(msgspec.Struct):
    """A chunk as the stream assembly reads it (`gateway.providers.openai.chat_assembly`): the head
    fields a completion repeats, and `usage` kept verbatim, members the gateway does not model
    included, for the one completion the chunks make."""

    id: str | None = None
    created: int | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    choices: list[ChunkChoice] = []
    usage: msgspec.Raw = msgspec.Raw(b"null")  # kept verbatim (msgspec.Raw takes no union)
    error: ErrorObject | str | None = None


# --- models -----------------------------------------------------------------------------------


class Model(msgspec.Struct):
    id: str
    created: int
    owned_by: str
    object: str = "model"


class ModelList(msgspec.Struct):
    data: list[Model]
    object: str = "list"
