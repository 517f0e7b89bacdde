"""Anthropic Messages API bodies the mock sends: a whole message, the streamed event sequence,
and errors."""

from __future__ import annotations

from typing import Any

import msgspec

from mock_upstream.cache import PromptUsage
from mock_upstream.content import split_pieces
from mock_upstream.generation import Generation
from mock_upstream.openai_format import ReplyHeader

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                529: "overloaded_error"}  # fmt: skip


def error_body(status: int, message: str) -> bytes:
    error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}
    return msgspec.json.encode({"type": "error", "error": error})


def usage_object(prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    """Anthropic usage: `input_tokens` excludes the cache read and cache write tokens."""
    return {
        "input_tokens": prompt.tokens - prompt.cache_read - prompt.cache_write,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": prompt.cache_write,
        "cache_read_input_tokens": prompt.cache_read,
    }


def _tier(head: ReplyHeader) -> dict[str, Any]:
    """The usage's `service_tier` where the answer names one (Anthropic's: standard, priority)."""
    return {} if head.service_tier is None else {"service_tier": head.service_tier}


def anthropic_served_tier(body: dict[str, Any], serve_tier: str | None) -> str | None:
    """The tier a message names: `serve_tier` when the mock is told one, else `standard` for a
    request that asked for a tier (the mock has no Priority Tier capacity), else none."""
    if serve_tier is not None:
        return serve_tier
    return "standard" if isinstance(body.get("service_tier"), str) else None


def _stop_reason(generation: Generation) -> str:
    if generation.tool is not None:
        return "tool_use"
    return "max_tokens" if generation.truncated else "end_turn"


def _content(generation: Generation) -> list[dict[str, Any]]:
    tool = generation.tool
    if tool is not None:
        return [{"type": "tool_use", "id": tool.call_id, "name": tool.name, "input": tool.input}]
    return [{"type": "text", "text": " ".join(generation.choices[0])}]


def _envelope(head: ReplyHeader, content: list[dict[str, Any]], stop_reason: str | None) -> dict[str, Any]:
    return {"id": head.id, "type": "message", "role": "assistant", "model": head.model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None}  # fmt: skip


def message(head: ReplyHeader, generation: Generation, usage: PromptUsage | None) -> bytes:
    body = _envelope(head, _content(generation), _stop_reason(generation))
    if usage is not None:
        body["usage"] = usage_object(usage, generation.tokens) | _tier(head)
    return msgspec.json.encode(body)


def event(payload: dict[str, Any]) -> bytes:
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + msgspec.json.encode(payload) + b"\n\n"


def _block_events(generation: Generation, chunks: int) -> list[dict[str, Any]]:
    """content_block_start, ping, the deltas and content_block_stop of the one content block."""
    tool = generation.tool
    if tool is None:
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [
            {"type": "text_delta", "text": piece} for piece in split_pieces(generation.choices[0], chunks)
        ]
    else:
        start = {"type": "tool_use", "id": tool.call_id, "name": tool.name, "input": {}}
        pieces = [tool.arguments[i : i + 16] for i in range(0, len(tool.arguments), 16)]
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
    return [
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "ping"},
        *({"type": "content_block_delta", "index": 0, "delta": delta} for delta in deltas),
        {"type": "content_block_stop", "index": 0},
    ]


def message_stream(
    head: ReplyHeader, generation: Generation, usage: PromptUsage | None, chunks: int
) -> list[bytes]:
    """Every SSE event of a streamed message, from message_start to message_stop."""
    started = _envelope(head, [], None)
    stop = {"stop_reason": _stop_reason(generation), "stop_sequence": None}
    closing: dict[str, Any] = {"type": "message_delta", "delta": stop}
    if usage is not None:
        started["usage"] = usage_object(usage, 1) | _tier(head)
        closing["usage"] = {"output_tokens": generation.tokens}
    events = [{"type": "message_start", "message": started}, *_block_events(generation, chunks), closing]
    events.append({"type": "message_stop"})
    return [event(payload) for payload in events]
