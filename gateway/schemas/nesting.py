"""How deep a decoded JSON value nests, and the one bound every parser holds requests to.

msgspec decodes about a thousand levels before it refuses, but the gateway re-encodes parts of a
body later (a tool's schema for another provider, a batch line, a translated request), and some of
those encoders recurse in Python, past the interpreter's own limit: a 500 long after parsing. One
bound, checked where a body is parsed, keeps every later step inside it. 64 levels is far beyond
any real request (OpenAI's structured outputs allow 10 levels of schema nesting; a deep chat body
is ~8) and far below any recursion limit.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_NESTING = 64
TOO_DEEP = (
    f"The JSON nests arrays and objects more than {MAX_NESTING} levels deep; {MAX_NESTING} is the limit"
)


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How many arrays and objects deep `value` nests (a scalar is 0), counted up to `limit` + 1:
    the walk stops as soon as the bound is passed, so a hostile value costs no more than a legal one."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def too_deep(value: Any, raw: bytes | None = None, limit: int = MAX_NESTING) -> bool:
    """Whether `value` nests past `limit`. With the raw JSON it came from, a body with fewer
    brackets than the bound (most requests) is passed without a walk."""
    if raw is not None and raw.count(b"{") + raw.count(b"[") <= limit:
        return False
    return nesting_depth(value, limit) > limit


def json_too_deep(raw: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text `raw` nests past `limit`, for parsers that decode straight to a typed
    value (whose own errors would not name the bound, or would be msgspec's recursion guard). Text
    with fewer brackets than the bound is passed unread; text that is not JSON is left to the
    caller's parser to refuse."""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return False
    try:
        value = msgspec.json.decode(raw)
    except RecursionError:  # msgspec's guard: thousands of levels
        return True
    except msgspec.DecodeError:
        return False
    return nesting_depth(value, limit) > limit
