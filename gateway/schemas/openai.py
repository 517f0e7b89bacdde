"""The OpenAI wire format as msgspec Structs: the typed view of what clients send and receive.

Request bodies are decoded once into a dict (so every field the client sent can be forwarded
untouched) and then converted into these Structs to validate the fields the gateway reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

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


# --- responses --------------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct, omit_defaults=False):
    cached_tokens: int = 0


class Usage(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: dict[str, Any] | None = None


class Model(msgspec.Struct):
    id: str
    created: int
    owned_by: str
    object: str = "model"


class ModelList(msgspec.Struct):
    data: list[Model]
    object: str = "list"
