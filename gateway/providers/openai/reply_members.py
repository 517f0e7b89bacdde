"""The members the gateway sets in an OpenAI reply or chunk it passes through (`model`, and in
`usage` the cost and cached tokens), spliced into the bytes, the rest of the body kept as sent.

A splice is made only where the bytes say for sure what they are. JSON escapes every quote inside a
string, so the bytes `"model"` are a key or a whole string value, never part of a longer string: a
key occurring once, followed by a colon, can only be that key. A body the bytes leave in doubt (a
second occurrence, an escape inside the value) is decoded and encoded again instead.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

# The member's value, found by one regular expression once the bytes of its key occur only once.
_MODEL_VALUE = re.compile(rb'"model"[ \t\n\r]*:[ \t\n\r]*("[^"\\]*")')  # a string without escapes
_USAGE_OPENING = re.compile(rb'"usage"[ \t\n\r]*:[ \t\n\r]*\{([ \t\n\r]*\})?')  # group 1: `}` of `{}`
_MODEL_KEY, _USAGE_KEY = b'"model"', b'"usage"'
_CACHED_DETAILS = b'"prompt_tokens_details":{"cached_tokens":0}'


def with_model(body: bytes, model: bytes) -> bytes:
    """The body with its top-level `model` set to `model` (a JSON string: the alias asked for).

    The value is spliced when `"model"` occurs once, as a key, with a string value free of escapes;
    OpenAI's bodies and chunks have no other object with that key. A body without those bytes is
    left as it is."""
    count = body.count(_MODEL_KEY)
    if count == 0:
        return body
    found = _MODEL_VALUE.search(body) if count == 1 else None
    if found is not None:
        start, end = found.span(1)
        if body[start:end] == model:
            return body
        return b"".join((body[:start], model, body[end:]))
    document = msgspec.json.decode(body)
    if not isinstance(document, dict) or "model" not in document:
        return body  # the bytes were a value, or an object's of no concern
    document["model"] = msgspec.Raw(model)
    return msgspec.json.encode(document)


def cost_member(cost: str) -> bytes:
    """`"cost":"<cost>"`: the exact cost, a decimal string (digits and a point, nothing to escape)."""
    return b'"cost":"' + cost.encode() + b'"'


def with_usage_members(body: bytes, cost: str | None, cached_tokens: bool) -> bytes:
    """The body with, in its top-level `usage` object, `cost` (when given) and, if `cached_tokens`,
    `prompt_tokens_details.cached_tokens` 0 (servers that leave it out, vLLM and most other
    OpenAI-compatible ones, leave it out of every answer, so this is the common case).

    The members are spliced in after `"usage":{` when that key is the body's only one and no
    member about to be added follows it already; the caller found a top-level `usage` object, so
    those bytes open it. Anything else is decoded and encoded again, an upstream's own `cost`
    replaced."""
    if cost is None and not cached_tokens:
        return body
    found = _USAGE_OPENING.search(body) if body.count(_USAGE_KEY) == 1 else None
    # (a member of usage comes after its key: the rest of the body is where to look for one)
    if (
        found is not None
        and not (cached_tokens and body.find(b'"prompt_tokens_details"', found.start()) >= 0)
        and not (cost is not None and body.find(b'"cost"', found.start()) >= 0)
    ):
        if cost is None:
            members = _CACHED_DETAILS
        else:
            members = cost_member(cost) + b"," + _CACHED_DETAILS if cached_tokens else cost_member(cost)
        at = found.end() if found.group(1) is None else found.start(1)
        separator = b"" if found.group(1) is not None else b","  # "usage": {} has no member to follow
        return b"".join((body[:at], members, separator, body[at:]))
    document: dict[str, Any] = msgspec.json.decode(body)
    usage = document["usage"]
    if cost is not None:
        usage["cost"] = cost
    if cached_tokens:
        details = usage.get("prompt_tokens_details")
        usage["prompt_tokens_details"] = {
            **(details if isinstance(details, dict) else {}),
            "cached_tokens": 0,
        }
    return msgspec.json.encode(document)
