"""Anthropic's prompt-cache rules, checked on a client's own Messages request before it is forwarded.

The same rules as `anthropic_cache` applies to translated chat requests: at most 4 breakpoints,
counted in prompt order (tools, system, messages, then the request's own `cache_control`, which
puts one on the last block), and no `1h` breakpoint after a `5m` one. Each `cache_control` is
validated where it sits, so the 400 names its parameter.
"""

from __future__ import annotations

from collections.abc import Iterator

from gateway.providers.anthropic.cache import check_breakpoint_order, invalid_cache_control
from gateway.schemas.anthropic import CacheControl, ContentBlock, MessagesRequest

_TTLS = ("5m", "1h")


def check_breakpoints(request: MessagesRequest) -> None:
    """Raise InvalidRequest (code invalid_cache_control) when Anthropic would refuse the layout."""
    check_breakpoint_order(list(_breakpoints(request)))


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
    if raw is None:
        return
    param = f"{where}.cache_control" if where else "cache_control"
    kind, ttl = raw.get("type"), raw.get("ttl")
    if kind != "ephemeral":
        raise invalid_cache_control(f"{param}: type must be 'ephemeral', not {kind!r}", param)
    if ttl is not None and ttl not in _TTLS:
        raise invalid_cache_control(f"{param}: ttl must be '5m' or '1h', not {ttl!r}", param)
    yield ttl or "5m"
