"""A chat completion stream chunk as far as the gateway reads one: what the stream assembly
(`chat_assembly`) and the translations from chat (`messages_stream`, `responses_stream`) decode."""

from __future__ import annotations

from typing import Any

import msgspec


class FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    type: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(msgspec.Struct):
    index: int = 0
    delta: Delta | None = None
    finish_reason: str | None = None
    stop_reason: Any = None  # vLLM and SGLang: the stop string that ended the text


class ChatChunk(msgspec.Struct):
    id: str | None = None
    created: int | None = None
    choices: list[ChunkChoice] = []
