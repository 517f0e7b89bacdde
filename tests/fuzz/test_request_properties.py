"""Properties of `parse_request`: any bytes either parse or raise a GatewayError, never anything else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from tests.fuzz.strategies import BODIES, CHAT, COMPLETIONS, EMBEDDINGS, JSON_VALUES, RAW_BODIES

PATHS = {Endpoint.CHAT: CHAT, Endpoint.COMPLETIONS: COMPLETIONS, Endpoint.EMBEDDINGS: EMBEDDINGS}
MAX_MESSAGES = 3


def _parses_or_refuses(raw: bytes, endpoint: Endpoint) -> None:
    refused: GatewayError | None = None
    try:
        parsed = parse_request(raw, endpoint, MAX_MESSAGES)
    except GatewayError as exc:
        refused = exc
    if refused is not None:
        assert refused.status == 400
        return
    assert parsed.model
    assert "gateway" not in parsed.body
    if parsed.chat is not None:
        assert 1 <= len(parsed.chat.messages) <= MAX_MESSAGES


@given(raw=RAW_BODIES, endpoint=st.sampled_from(Endpoint))
def test_raw_bytes_parse_or_raise_a_gateway_error(raw: bytes, endpoint: Endpoint) -> None:
    _parses_or_refuses(raw, endpoint)


@st.composite
def bodies_with_garbage(draw: st.DrawFn) -> tuple[Endpoint, dict[str, Any]]:
    endpoint = draw(st.sampled_from([Endpoint.CHAT, Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS]))
    body = draw(BODIES[PATHS[endpoint]])
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=3)):
        body[key] = draw(JSON_VALUES)
    return endpoint, body


@given(bodies_with_garbage())
def test_mutated_bodies_parse_or_raise_a_gateway_error(case: tuple[Endpoint, dict[str, Any]]) -> None:
    endpoint, body = case
    _parses_or_refuses(json.dumps(body).encode(), endpoint)


@given(st.sampled_from([Endpoint.CHAT, Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS]), st.data())
def test_valid_bodies_are_forwarded_untouched_but_for_the_gateway_object(
    endpoint: Endpoint, data: st.DataObject
) -> None:
    body = data.draw(BODIES[PATHS[endpoint]])
    body.pop("gateway", None)
    body.pop("prompt_cache_retention", None)  # normalised on the way (in-memory -> in_memory)
    try:
        parsed = parse_request(json.dumps(body).encode(), endpoint, 100)
    except GatewayError:
        return  # e.g. stream_options without stream: refused, which the test above covers
    assert parsed.body == json.loads(json.dumps(body))
