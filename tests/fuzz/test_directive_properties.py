"""Properties of `parse_directives`: only GatewayErrors escape, and header and body forms agree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import DirectiveConflict, GatewayError
from gateway.routing.directives import BATCH_ID, CACHE_KEY_MAX, Directives, Fallback, parse_directives
from tests.fuzz.strategies import DIRECTIVE_HEADERS, JSON_VALUES

HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"))
NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)
BATCH_IDS = st.from_regex(BATCH_ID, fullmatch=True)
CACHE_KEYS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=CACHE_KEY_MAX
)


@given(
    headers=st.dictionaries(st.sampled_from(DIRECTIVE_HEADERS), HEADER_TEXT, max_size=5),
    body=st.one_of(
        JSON_VALUES, st.dictionaries(st.sampled_from(["batch", "region", "provider"]), JSON_VALUES)
    ),
)
def test_any_input_parses_or_raises_a_gateway_error(headers: dict[str, str], body: Any) -> None:
    refused: GatewayError | None = None
    try:
        directives = parse_directives(headers, body)
    except GatewayError as exc:
        refused = exc
    if refused is not None:
        assert refused.status == 400
    elif directives.batch is not None:
        assert BATCH_ID.fullmatch(directives.batch)


@st.composite
def directive_sets(draw: st.DrawFn) -> Directives:
    return Directives(
        batch=draw(st.none() | BATCH_IDS),
        region=draw(st.none() | NAMES),
        providers=tuple(draw(st.lists(NAMES, unique=True, max_size=3))),
        fallback=draw(st.sampled_from(Fallback)),
        cache_key=draw(st.none() | CACHE_KEYS),
    )


def as_headers(directives: Directives) -> dict[str, str]:
    headers = {"x-gateway-fallback": directives.fallback.value}
    if directives.batch is not None:
        headers["x-gateway-batch"] = directives.batch
    if directives.region is not None:
        headers["x-gateway-region"] = directives.region
    if directives.providers:
        headers["x-gateway-provider"] = ", ".join(directives.providers)
    if directives.cache_key is not None:
        headers["x-gateway-cache-key"] = directives.cache_key
    return headers


def as_body(directives: Directives) -> dict[str, Any]:
    body: dict[str, Any] = {"fallback": directives.fallback.value}
    if directives.batch is not None:
        body["batch"] = directives.batch
    if directives.region is not None:
        body["region"] = directives.region
    if directives.providers:
        body["provider"] = list(directives.providers)
    if directives.cache_key is not None:
        body["cache_key"] = directives.cache_key
    return body


@given(directive_sets())
def test_header_and_body_forms_mean_the_same(directives: Directives) -> None:
    assert parse_directives(as_headers(directives), None) == directives
    assert parse_directives({}, as_body(directives)) == directives
    assert parse_directives(as_headers(directives), as_body(directives)) == directives


@given(directive_sets(), directive_sets())
def test_headers_and_body_that_disagree_are_a_conflict(first: Directives, second: Directives) -> None:
    headers, body = as_headers(first), as_body(second)
    disagree = any(
        getattr(first, name) != getattr(second, name)
        and getattr(first, name) not in (None, ())
        and getattr(second, name) not in (None, ())
        for name in ("batch", "region", "providers", "fallback", "cache_key")
    )
    if disagree:
        with pytest.raises(DirectiveConflict):
            parse_directives(headers, body)
    else:
        parse_directives(headers, body)
