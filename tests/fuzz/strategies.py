"""Hypothesis strategies for hostile OpenAI-endpoint requests: valid-ish bodies, then mutated.

A `FuzzRequest` is what one HTTP call sends: path, raw body bytes, headers (bytes values, so
latin-1 and odd characters reach the app as a real server would pass them on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
MODELS = {CHAT: "gpt-4o-mini", COMPLETIONS: "gpt-4o-mini", EMBEDDINGS: "text-embedding-3-small"}
BATCH_IDS = ["b-1", "run:42.part_7", "x" * 128, "x" * 129, "bad batch", "", "caf\u00e9"]
DIRECTIVE_HEADERS = (
    "x-gateway-batch",
    "x-gateway-region",
    "x-gateway-provider",
    "x-gateway-fallback",
    "x-gateway-cache-key",
)


@dataclass(frozen=True)
class FuzzRequest:
    path: str
    body: bytes
    headers: dict[str, bytes]


# --- JSON values ------------------------------------------------------------------------------

EDGE_NUMBERS = st.sampled_from(
    [0, -1, 1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308, 1e-320, 0.5, -0.0]
)
TEXT = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.sampled_from(
        ["", " ", "\u0000", "\u202e", "\U0001d518\u00e9\u4e2d", "a" * 300, "gpt-4o-mini", "mock-us"]
    ),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), EDGE_NUMBERS, st.floats(allow_nan=False), TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=8,
)


# --- valid-ish bodies ---------------------------------------------------------------------------


def _message() -> st.SearchStrategy[dict[str, Any]]:
    part = st.fixed_dictionaries(
        {"type": st.just("text"), "text": TEXT},
        optional={
            "cache_control": st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])
        },
    )
    return st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
            "content": st.one_of(TEXT, st.lists(part, min_size=1, max_size=2)),
        },
        optional={"name": TEXT, "cache_control": st.just({"type": "ephemeral"})},
    )


def _gateway_object() -> st.SearchStrategy[Any]:
    known = st.fixed_dictionaries(
        {},
        optional={
            "batch": st.one_of(st.sampled_from(BATCH_IDS), JSON_VALUES),
            "region": st.one_of(st.sampled_from(["us-east", "eu-west", "mars"]), JSON_VALUES),
            "provider": st.one_of(
                st.sampled_from(["mock-us", "mock-eu", ["mock-eu", "mock-us"], ["mock-us", "mock-us"], []]),
                JSON_VALUES,
            ),
            "fallback": st.one_of(st.sampled_from(["batch", "never", "sometimes"]), JSON_VALUES),
            "cache_key": st.one_of(TEXT, JSON_VALUES),
        },
    )
    unknown = st.dictionaries(st.text(max_size=8), JSON_VALUES, min_size=1, max_size=3)
    return st.one_of(known, unknown, JSON_VALUES)


def _chat_body() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"model": st.just(MODELS[CHAT]), "messages": st.lists(_message(), min_size=1, max_size=3)},
        optional={
            "stream": st.booleans(),
            "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
            "max_tokens": st.integers(min_value=1, max_value=64),
            "temperature": st.floats(min_value=0, max_value=2),
            "n": st.integers(min_value=1, max_value=3),
            "stop": st.one_of(TEXT, st.lists(TEXT, max_size=3)),
            "prompt_cache_key": TEXT,
            "prompt_cache_retention": st.sampled_from(["in_memory", "in-memory", "24h", "forever"]),
            "gateway": _gateway_object(),
            "user": TEXT,
        },
    )


def _completion_body() -> st.SearchStrategy[dict[str, Any]]:
    prompt = st.one_of(TEXT, st.lists(TEXT, max_size=3), st.lists(st.integers(0, 50_000), max_size=5))
    return st.fixed_dictionaries(
        {"model": st.just(MODELS[COMPLETIONS]), "prompt": prompt},
        optional={
            "stream": st.booleans(),
            "max_tokens": st.integers(min_value=1, max_value=64),
            "gateway": _gateway_object(),
        },
    )


def _embedding_body() -> st.SearchStrategy[dict[str, Any]]:
    text_input = st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=3), st.lists(st.integers(0, 50_000)))
    return st.fixed_dictionaries(
        {"model": st.just(MODELS[EMBEDDINGS]), "input": text_input},
        optional={
            "encoding_format": st.sampled_from(["float", "base64", "bogus"]),
            "dimensions": st.integers(min_value=-5, max_value=4096),
            "gateway": _gateway_object(),
        },
    )


BODIES = {CHAT: _chat_body(), COMPLETIONS: _completion_body(), EMBEDDINGS: _embedding_body()}


# --- mutations ----------------------------------------------------------------------------------


# Strategies are built once: building one per draw (and validating it) costs more than drawing.
_EDITS = st.integers(min_value=0, max_value=3)
_ACTIONS = st.sampled_from(["replace", "delete", "add"])
_FIELD_NAMES = st.text(max_size=12)
_GARBAGE = st.one_of(JSON_VALUES, EDGE_NUMBERS)
_INDEXES = st.integers(min_value=0, max_value=50)


def _mutate(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    """Replace, delete or add fields (at the top level or inside the first message)."""
    body = json.loads(json.dumps(body))  # a private deep copy
    for _ in range(draw(_EDITS)):
        target = body
        messages = body.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[0], dict) and draw(st.booleans()):
            target = messages[0]
        action, keys = draw(_ACTIONS), sorted(target)
        if action == "add" or not keys:
            target[draw(_FIELD_NAMES)] = draw(JSON_VALUES)
            continue
        key = keys[draw(_INDEXES) % len(keys)]
        if action == "delete":
            del target[key]
        else:
            target[key] = draw(_GARBAGE)
    return body


def _encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


RAW_BODIES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{", b"[]", b"null", b"42", b'"text"', b'{"model": NaN}', b"\xff\xfe{}"]),
    JSON_VALUES.map(_encode),
)


_BODY_KINDS = st.sampled_from(["valid", "mutated", "mutated", "raw"])


def _body(draw: st.DrawFn, path: str) -> bytes:
    kind = draw(_BODY_KINDS)
    if kind == "raw":
        return draw(RAW_BODIES)
    body = draw(BODIES[path])
    return _encode(_mutate(draw, body) if kind == "mutated" else body)


# --- headers ------------------------------------------------------------------------------------

HEADER_BYTES = st.binary(max_size=40).map(lambda raw: bytes(b for b in raw if b >= 0x20 and b != 0x7F))
HEADER_VALUES = st.one_of(
    st.sampled_from(
        [
            b"batch-1",
            b"us-east",
            b"eu-west",
            b"mock-us",
            b"mock-eu,mock-us",
            b"mock-us,,mock-eu",
            b"mock-us,mock-us",
            b"never",
            b"batch",
            b"",
            b" ",
            b"a" * 129,
            b"b" * 200,
            b"\xe9t\xe9",
            b"bad batch!",
            b"x,y,z",
            b"key-\xff",
        ]
    ),
    HEADER_BYTES,
)


_HEADER_NAMES = st.lists(st.sampled_from(DIRECTIVE_HEADERS), unique=True, max_size=3)
_AUTH_KINDS = st.sampled_from(["key"] * 18 + ["garbage", "none"])
_CONTENT_TYPES = st.sampled_from([None, b"application/json", b"text/plain", b"x/\xff"])
_PATHS = st.sampled_from([CHAT, COMPLETIONS, EMBEDDINGS])


def _headers(draw: st.DrawFn, authorization: str) -> dict[str, bytes]:
    headers = {name: draw(HEADER_VALUES) for name in draw(_HEADER_NAMES)}
    auth = draw(_AUTH_KINDS)
    if auth == "key":
        headers["authorization"] = authorization.encode()
    elif auth == "garbage":
        headers["authorization"] = draw(HEADER_VALUES)
    if (content_type := draw(_CONTENT_TYPES)) is not None:
        headers["content-type"] = content_type
    return headers


@st.composite
def fuzz_requests(draw: st.DrawFn, authorization: str, header_sets: int = 1) -> list[FuzzRequest]:
    """One generated body, sent with `header_sets` independently generated header sets.

    A body costs hypothesis several times more to draw than headers do, so more than one header set
    per body raises the requests a time budget allows.
    """
    path = draw(_PATHS)
    body = _body(draw, path)
    return [FuzzRequest(path, body, _headers(draw, authorization)) for _ in range(header_sets)]
