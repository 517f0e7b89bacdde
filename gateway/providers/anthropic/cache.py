"""Anthropic's prompt-cache rules: read `cache_control` hints and enforce Anthropic's limits.

Anthropic allows at most 4 breakpoints, counted in prompt order (tools, system, messages, then the
request's own `cache_control`, which puts one on the last block), and a `1h` breakpoint may not
come after a `5m` one. Breaking these is the client's mistake, so the gateway answers 400 before
sending rather than passing on a provider error; each `cache_control` is validated where it sits,
so the 400 names its parameter. The same check serves a client's own Messages request and one
translated from a chat completion.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.errors import InvalidRequest
from gateway.schemas.anthropic import CacheControl, ContentBlock, MessagesRequest

MAX_BREAKPOINTS = 4
_TTLS = ("5m", "1h")


def invalid_cache_control(message: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_cache_control")


def read_cache_control(raw: dict[str, Any] | None, where: str) -> CacheControl | None:
    """The Anthropic form of a client's `cache_control` at `where`; None when there is none."""
    if raw is None:
        return None
    _checked_ttl(raw, f"{where}.cache_control")
    ttl = raw.get("ttl")
    return {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}


def check_breakpoints(request: MessagesRequest) -> None:
    """Raise InvalidRequest (code invalid_cache_control) when Anthropic would refuse the layout."""
    check_breakpoint_order(list(_breakpoints(request)))


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


def _breakpoints(request: MessagesRequest) -> Iterator[str]:
    """The ttl of every breakpoint, in prompt order; each one validated where it sits."""
    for i, tool in enumerate(request.tools or ()):
        yield from _checked(tool.cache_control, f"tools[{i}]")
    if isinstance(request.system, list):
        for i, block in enumerate(request.system):
            yield from _block_breakpoints(block, f"system[{i}]")
    for i, message in enumerate(request.messages):
        if isinstance(message.content, list):
            for j, block in enumerate(message.content):
                yield from _block_breakpoints(block, f"messages[{i}].content[{j}]")
    yield from _checked(request.cache_control, None)  # automatic caching: on the last block


def _block_breakpoints(block: ContentBlock, where: str) -> Iterator[str]:
    if isinstance(block.content, list):  # a tool_result's own blocks come before the block itself
        for k, inner in enumerate(block.content):
            yield from _checked(inner.cache_control, f"{where}.content[{k}]")
    yield from _checked(block.cache_control, where)


def _checked(raw: CacheControl | None, where: str | None) -> Iterator[str]:
    if raw is not None:
        yield _checked_ttl(raw, f"{where}.cache_control" if where else "cache_control")


def _checked_ttl(raw: CacheControl, param: str) -> str:
    """The breakpoint's ttl ("5m" when it names none); InvalidRequest naming `param` if Anthropic
    would refuse it."""
    kind, ttl = raw.get("type"), raw.get("ttl")
    if kind != "ephemeral":
        raise invalid_cache_control(f"{param}: type must be 'ephemeral', not {kind!r}", param)
    if ttl is not None and ttl not in _TTLS:
        raise invalid_cache_control(f"{param}: ttl must be '5m' or '1h', not {ttl!r}", param)
    return str(ttl or "5m")
