"""Prompt-cache breakpoints for Anthropic: read `cache_control` hints and enforce Anthropic's rules.

Anthropic allows at most 4 breakpoints, counted in prompt order (tools, then system, then
messages), and a `1h` breakpoint may not come after a `5m` one. Breaking these is the client's
mistake, so the gateway answers 400 before sending rather than passing on a provider error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.errors import InvalidRequest
from gateway.providers.anthropic.wire import CacheControl, MessagesRequest, ToolResultBlock

MAX_BREAKPOINTS = 4
_TTLS = ("5m", "1h")


def invalid_cache_control(message: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_cache_control")


def read_cache_control(raw: dict[str, Any] | None, where: str) -> CacheControl | None:
    """The Anthropic form of a client's `cache_control` at `where`; None when there is none."""
    if raw is None:
        return None
    param = f"{where}.cache_control"
    kind = raw.get("type")
    if kind != "ephemeral":
        raise invalid_cache_control(f"{param}: type must be 'ephemeral', not {kind!r}", param)
    ttl = raw.get("ttl")
    if ttl is not None and ttl not in _TTLS:
        raise invalid_cache_control(f"{param}: ttl must be '5m' or '1h', not {ttl!r}", param)
    return CacheControl(type="ephemeral", ttl=ttl)


def check_breakpoints(request: MessagesRequest) -> None:
    """Raise InvalidRequest (code invalid_cache_control) when Anthropic would refuse the layout."""
    check_breakpoint_order([control.ttl or "5m" for control in _breakpoints(request)])


def check_breakpoint_order(ttls: list[str]) -> None:
    """Anthropic's rules over a prompt's breakpoints, given their ttls in prompt order (tools,
    system, messages): at most MAX_BREAKPOINTS, and no `1h` after a `5m`."""
    if len(ttls) > MAX_BREAKPOINTS:
        raise invalid_cache_control(
            f"{len(ttls)} cache_control breakpoints given; Anthropic allows at most {MAX_BREAKPOINTS} "
            "(counted over tools, system messages and messages)"
        )
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        raise invalid_cache_control(
            "a cache_control breakpoint with ttl '1h' comes after one with ttl '5m'; Anthropic needs "
            "longer-lived breakpoints first (order: tools, system, messages)"
        )


def _breakpoints(request: MessagesRequest) -> Iterator[CacheControl]:
    for tool in request.tools or ():
        if tool.cache_control:
            yield tool.cache_control
    for block in request.system or ():
        if block.cache_control:
            yield block.cache_control
    for message in request.messages:
        for content_block in message.content:
            if isinstance(content_block, ToolResultBlock) and isinstance(content_block.content, list):
                yield from (inner.cache_control for inner in content_block.content if inner.cache_control)
            if content_block.cache_control:
                yield content_block.cache_control
