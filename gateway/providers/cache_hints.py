"""Prompt-cache hints on OpenAI-shaped bodies: derive a cache key, apply a hint mode.

`cache_control` breakpoints (the Anthropic convention) may sit on tools, messages and content
parts; OpenAI-compatible upstreams either get them translated into `prompt_cache_key`, removed,
or passed through, per the provider's `cache_hints` setting.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from gateway.schemas.openai import ChatCompletionRequest, ChatMessage

HintMode = Literal["openai", "strip", "pass"]

OPENAI_HINT_FIELDS = ("prompt_cache_key", "prompt_cache_retention")


def derive_cache_key(team_id: str, chat: ChatCompletionRequest) -> str | None:
    """A stable key for the prefix up to the last breakpoint; None when there is no breakpoint.

    Tools come before messages in the prefix (as Anthropic orders them), so a breakpoint on a
    tool covers the tools up to it, and one in a message covers every tool plus the messages up
    to it. The digest is the same in every process: no `hash()`, sorted-key canonical JSON.
    """
    tools = chat.tools or []
    last_message = last_message_breakpoint(chat.messages)
    if last_message is not None:
        prefix: dict[str, Any] = {"tools": tools, "messages": chat.messages[: last_message + 1]}
    else:
        last_tool = next((i for i in reversed(range(len(tools))) if tools[i].cache_control), None)
        if last_tool is None:
            return None
        prefix = {"tools": tools[: last_tool + 1], "messages": []}
    digest = hashlib.sha256(team_id.encode())
    digest.update(b"\x00")
    digest.update(msgspec.json.encode(prefix, order="sorted"))
    return digest.hexdigest()[:32]


def last_message_breakpoint(messages: list[ChatMessage]) -> int | None:
    """The index of the last message with a breakpoint on it or on one of its parts."""
    for i in reversed(range(len(messages))):
        message = messages[i]
        if message.cache_control:
            return i
        if isinstance(message.content, list) and any(part.cache_control for part in message.content):
            return i
    return None


def apply_openai_hints(body: dict[str, Any], mode: HintMode, cache_key: str | None) -> dict[str, Any]:
    """Return the body with hints forwarded per `mode`; `body` itself is never modified."""
    if mode == "pass":
        return body
    result = strip_cache_control(body)
    if mode == "strip":
        if any(field in result for field in OPENAI_HINT_FIELDS):
            result = {k: v for k, v in result.items() if k not in OPENAI_HINT_FIELDS}
        return result
    if cache_key is not None and result.get("prompt_cache_key") is None:
        result = {**result, "prompt_cache_key": cache_key}
    return result


def has_cache_control(body: dict[str, Any]) -> bool:
    """True when any tool, message or content part of the body carries `cache_control`."""
    for tool in _dicts(body.get("tools")):
        if "cache_control" in tool:
            return True
    for message in _dicts(body.get("messages")):
        if "cache_control" in message:
            return True
        if any("cache_control" in part for part in _dicts(message.get("content"))):
            return True
    return False


def strip_cache_control(body: dict[str, Any]) -> dict[str, Any]:
    """The body without any `cache_control`; copies only the containers that change."""
    if not has_cache_control(body):
        return body
    result = dict(body)
    if isinstance(body.get("tools"), list):
        result["tools"] = [_without_cache_control(tool) for tool in body["tools"]]
    if isinstance(body.get("messages"), list):
        result["messages"] = [_message_without_cache_control(m) for m in body["messages"]]
    return result


def _message_without_cache_control(message: Any) -> Any:
    message = _without_cache_control(message)
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        parts = message["content"]
        if any(isinstance(part, dict) and "cache_control" in part for part in parts):
            message = {**message, "content": [_without_cache_control(part) for part in parts]}
    return message


def _without_cache_control(item: Any) -> Any:
    if isinstance(item, dict) and "cache_control" in item:
        return {k: v for k, v in item.items() if k != "cache_control"}
    return item


def _dicts(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]
