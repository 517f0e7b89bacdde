"""OpenAI-format chat completions and stream chunks, as translating adapters (Anthropic) emit them.

Fields OpenAI always sends (`logprobs`, `refusal`, `finish_reason`) are always encoded, null when
empty; optional ones (`tool_calls`, `usage`) are left out when unset, as OpenAI does.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from gateway.providers.base import TokenUsage

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class PromptTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class CompletionUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    cost: str | UnsetType = UNSET  # USD, an exact decimal string (SPEC section 2)

    @classmethod
    def of(cls, usage: TokenUsage) -> CompletionUsage:
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(
                cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens
            ),
        )


class FunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: str = "function"
    function: FunctionCall


class ResponseMessage(msgspec.Struct, kw_only=True):
    role: str = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCall] | UnsetType = UNSET


class Choice(msgspec.Struct, kw_only=True):
    index: int = 0
    message: ResponseMessage
    logprobs: None = None
    finish_reason: FinishReason


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage | UnsetType = UNSET


class FunctionDelta(msgspec.Struct, kw_only=True):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ToolCallDelta(msgspec.Struct, kw_only=True):
    index: int
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    function: FunctionDelta | UnsetType = UNSET


class ChunkDelta(msgspec.Struct, kw_only=True):
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET


class ChunkChoice(msgspec.Struct, kw_only=True):
    index: int = 0
    delta: ChunkDelta
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | UnsetType = UNSET
