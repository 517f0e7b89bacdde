"""A Messages API body as the proxy parses it (`parse_request` with Endpoint.MESSAGES): the body to
forward, its output limit, and the 400s that name their parameter."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.providers.base import Endpoint
from gateway.proxy.request import ParsedRequest, parse_request
from tests.unit.dialects.messages.calls import messages_body

MAX_MESSAGES = 3


def parse(body: dict[str, Any]) -> ParsedRequest:
    return parse_request(msgspec.json.encode(body), Endpoint.MESSAGES, MAX_MESSAGES)


def test_the_body_is_kept_whole_but_for_the_gateway_object() -> None:
    body = messages_body(
        stream=True,
        system=[{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}
        ],
        some_future_field=[1, 2],
    )
    parsed = parse({**body, "gateway": {"batch": "b-1"}})
    assert parsed.body == body
    assert parsed.gateway_object == {"batch": "b-1"}
    assert (parsed.endpoint, parsed.model, parsed.stream, parsed.max_output_tokens) == (
        Endpoint.MESSAGES,
        "claude-alias",
        True,
        256,
    )
    assert parsed.chat is None and not parsed.client_wants_usage


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({k: v for k, v in messages_body().items() if k != "max_tokens"}, "max_tokens"),
        (messages_body(max_tokens=None), "max_tokens"),
        (messages_body(max_tokens="many"), "max_tokens"),
        (messages_body(max_tokens=-1), "max_tokens"),
        (messages_body(messages=[]), "messages"),
        (messages_body(messages=[{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)), "messages"),
        (messages_body(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
        (
            messages_body(messages=[{"role": "user", "content": [{"text": "no type"}]}]),
            "messages[0].content[0]",
        ),
        (messages_body(tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (messages_body(system=7), "system"),
        (messages_body(model=""), "model"),
    ],
)
def test_bad_bodies_are_400_naming_the_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(body)
    assert (refused.value.status, refused.value.param) == (400, param)
