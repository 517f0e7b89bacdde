"""count_tokens' pure parts: the request read, the call to an Anthropic deployment, its answer
judged, and the gateway's own estimate where no provider counts."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from gateway.dialects.messages.count import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    count_request,
    counted_tokens,
    estimate_tokens,
    read_count_request,
)
from gateway.errors import InvalidRequest, UpstreamError
from gateway.metering.pricing import Tariff
from gateway.routing.deployment import Deployment
from gateway.schemas.anthropic import CountTokensRequest
from gateway.settings import Price, ProviderKind
from tests.unit.providers.calls import SECRET, provider

DEPLOYMENT = Deployment(
    id="claude-direct/claude-up",
    model="claude",
    provider=provider(ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com"),
    upstream_model="claude-up",
    tariff=Tariff(Price(input=Decimal(3))),
)


def counting(**fields: Any) -> dict[str, Any]:
    return {"model": "claude", "messages": [{"role": "user", "content": "Hello"}], **fields}


def test_the_request_is_read_and_forwarded_with_the_upstream_model() -> None:
    raw = msgspec.json.encode({**counting(system="Be terse.", tools=[]), "gateway": {"region": "us-east"}})
    body, typed, directives = read_count_request(raw)
    assert directives == {"region": "us-east"}
    assert typed.model == "claude" and "gateway" not in body
    request = count_request(
        body, DEPLOYMENT.provider, DEPLOYMENT.upstream_model, "https://api.anthropic.com/"
    )
    assert request.url == "https://api.anthropic.com/v1/messages/count_tokens"
    assert request.headers["x-api-key"] == SECRET and request.headers["anthropic-version"]
    assert json.loads(request.content) == {**body, "model": "claude-up"}


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"[]", None),
        (b"{not json", None),
        (msgspec.json.encode({"messages": [{"role": "user", "content": "x"}]}), "model"),
        (msgspec.json.encode(counting(messages=[])), "messages"),
        (msgspec.json.encode(counting(messages=[{"role": "robot", "content": "x"}])), "messages[0].role"),
        (msgspec.json.encode(counting(model="")), "model"),
    ],
)
def test_bad_requests_are_400(raw: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_count_request(raw)
    assert (refused.value.status, refused.value.param) == (400, param)


def test_the_upstream_count_is_read() -> None:
    assert counted_tokens(b'{"input_tokens": 1234}') == 1234


@pytest.mark.parametrize(
    "body",
    [
        b'{"input_tokens": -1}',
        b'{"input_tokens": 10000000000000}',
        b'{"input_tokens": "12"}',
        b"{}",
        b"<html>",
    ],
)
def test_a_count_that_cannot_be_true_is_a_bad_upstream_answer(body: bytes) -> None:
    with pytest.raises(UpstreamError) as failed:
        counted_tokens(body)
    assert failed.value.code == "upstream_bad_response"


def typed(**fields: Any) -> CountTokensRequest:
    return msgspec.convert(counting(**fields), CountTokensRequest)


def test_the_estimate_counts_text_framing_tools_and_images() -> None:
    text = "word " * 400  # 2000 bytes: ~500 tokens at 4 bytes a token
    assert estimate_tokens(typed(messages=[{"role": "user", "content": text}])) == 500 + MESSAGE_OVERHEAD
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}}
    with_image = typed(messages=[{"role": "user", "content": [image, {"type": "text", "text": text}]}])
    assert estimate_tokens(with_image) == 500 + MESSAGE_OVERHEAD + IMAGE_TOKENS  # the base64 is not text
    tool = {"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    assert estimate_tokens(typed(tools=[tool])) > estimate_tokens(typed())
    assert estimate_tokens(typed(system=[{"type": "text", "text": text}])) == estimate_tokens(
        typed(system=text)
    )
