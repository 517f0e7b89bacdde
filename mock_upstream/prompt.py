"""Reading a request's prompt: its token count, its last user text and its cacheable prefix.

A prompt is flattened into segments (tool definitions, system blocks, message parts) in the order
a provider's prompt cache sees them. The cacheable prefix ends at the last `cache_control`
breakpoint or, with an OpenAI `prompt_cache_key` and no breakpoint, before the last message.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from mock_upstream.content import text_tokens

MESSAGE_OVERHEAD = 4  # tokens per message for role and framing, as OpenAI counts them
REPLY_PRIMING = 3  # tokens that start the assistant's reply


@dataclass(frozen=True, slots=True)
class Segment:
    fingerprint: bytes  # the segment's exact JSON, for prefix identity
    tokens: int
    breakpoint: bool  # carries a cache_control
    message_index: int  # -1 for tool definitions and a separate system prompt


@dataclass(frozen=True, slots=True)
class PromptShape:
    """What the mock needs to know about a prompt to meter it."""

    tokens: int
    prefix_key: bytes | None  # identifies the cacheable prefix; None when nothing is cacheable
    prefix_tokens: int


def part_text(part: Any) -> str:
    """The text a content part or block contributes to the prompt."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    if "content" in part:
        return content_text(part["content"])
    if "input" in part:
        return msgspec.json.encode(part["input"]).decode()
    return ""


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string or a list of parts."""
    if isinstance(content, list):
        return "".join(part_text(part) for part in content)
    return part_text(content)


def last_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _segment(item: Any, text: str, index: int, extra_tokens: int = 0, breakpoint: bool = False) -> Segment:
    has_hint = isinstance(item, dict) and item.get("cache_control") is not None
    return Segment(msgspec.json.encode(item), text_tokens(text) + extra_tokens, has_hint or breakpoint, index)


def _message_segments(message: Any, index: int) -> list[Segment]:
    if not isinstance(message, dict):
        return [_segment(message, "", index, MESSAGE_OVERHEAD)]
    content = message.get("content")
    parts = content if isinstance(content, list) and content else [content]
    tool_calls = message.get("tool_calls")
    extra = MESSAGE_OVERHEAD + (text_tokens(msgspec.json.encode(tool_calls).decode()) if tool_calls else 0)
    segments = [_segment(part, part_text(part), index) for part in parts]
    first = segments[0]
    segments[0] = Segment(first.fingerprint, first.tokens + extra, first.breakpoint, index)
    if message.get("cache_control") is not None:
        last = segments[-1]
        segments[-1] = Segment(last.fingerprint, last.tokens, True, index)
    return segments


def _tool_segments(tools: Any) -> list[Segment]:
    if not isinstance(tools, list):
        return []
    return [_segment(tool, msgspec.json.encode(tool).decode(), -1) for tool in tools]


def _shape(segments: list[Segment], scope: str, cache_key: str | None, priming: int) -> PromptShape:
    total = sum(segment.tokens for segment in segments) + priming
    breakpoints = [i for i, segment in enumerate(segments) if segment.breakpoint]
    if breakpoints:
        prefix = segments[: breakpoints[-1] + 1]
    elif cache_key is not None:
        last_message = max((segment.message_index for segment in segments), default=-1)
        prefix = [segment for segment in segments if segment.message_index < last_message] or segments
    else:
        return PromptShape(total, None, 0)
    digest = hashlib.blake2b(f"{scope}\x00{cache_key or ''}".encode(), digest_size=16)
    for segment in prefix:
        digest.update(segment.fingerprint)
    return PromptShape(total, digest.digest(), sum(segment.tokens for segment in prefix))


def chat_prompt(body: dict[str, Any]) -> PromptShape:
    """An OpenAI chat request's prompt (tools, then messages)."""
    segments = _tool_segments(body.get("tools"))
    for index, message in enumerate(body.get("messages") or []):
        segments.extend(_message_segments(message, index))
    cache_key = body.get("prompt_cache_key")
    return _shape(
        segments,
        f"openai:{body.get('model')}",
        cache_key if isinstance(cache_key, str) else None,
        REPLY_PRIMING,
    )


def anthropic_prompt(body: dict[str, Any]) -> PromptShape:
    """An Anthropic Messages request's prompt (tools, then system, then messages)."""
    segments = _tool_segments(body.get("tools"))
    system = body.get("system")
    if isinstance(system, list):
        segments.extend(_segment(block, part_text(block), -1) for block in system)
    elif isinstance(system, str) and system:
        segments.append(_segment(system, system, -1))
    for index, message in enumerate(body.get("messages") or []):
        segments.extend(_message_segments(message, index))
    return _shape(segments, f"anthropic:{body.get('model')}", None, 0)


def plain_texts(value: Any) -> list[str | list[int]]:
    """The inputs of a completions `prompt` or an embeddings `input`: strings or token arrays."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, int) for item in value):
        return [list(value)]
    if isinstance(value, list):
        return [item if isinstance(item, str | list) else str(item) for item in value]
    return [""]


def plain_tokens(inputs: list[str | list[int]]) -> int:
    return sum(text_tokens(item) if isinstance(item, str) else len(item) for item in inputs)
