"""Builders the Messages API adapter tests share: calls, a price, and SSE frame readers."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import anthropic.types
from anthropic._streaming import ServerSentEvent, SSEDecoder
from pydantic import TypeAdapter

from gateway.metering.pricing import Tariff
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.settings import Price

ALIAS = "claude-alias"
UPSTREAM_MODEL = "upstream-model"
PRICE = Price(
    input=Decimal("3"), output=Decimal("15"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75")
)
TARIFF = Tariff(PRICE)
EVENTS: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)


def messages_body(**fields: Any) -> dict[str, Any]:
    return {"model": ALIAS, "max_tokens": 256, "messages": [{"role": "user", "content": "Hello"}], **fields}


def messages_call(
    body: dict[str, Any], *, tariff: Tariff | None = TARIFF, cache_key: str | None = None
) -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.MESSAGES,
        body=body,
        upstream_model=UPSTREAM_MODEL,
        stream=bool(body.get("stream")),
        client_wants_usage=False,
        team_id="team-1",
        cache_key=cache_key,
        tariff=tariff,
    )


def cost(prompt: int, completion: int, cached: int = 0, written: int = 0) -> Decimal:
    """The price of those counts at PRICE, computed here from the per-million rates."""
    million = Decimal(1_000_000)
    return (
        (prompt - cached - written) * PRICE.input
        + cached * (PRICE.cached_input or PRICE.input)
        + written * (PRICE.cache_write or PRICE.input)
        + completion * PRICE.output
    ) / million


def sse_events(stream: bytes) -> list[ServerSentEvent]:
    """The events an SSE client (the anthropic SDK's own decoder) reads from these bytes."""
    return list(SSEDecoder().iter_bytes(iter([stream])))


def event_payloads(frames: list[bytes]) -> list[dict[str, Any]]:
    """Each event's JSON data, after checking its `event:` line names its `type`."""
    payloads = []
    for event in sse_events(b"".join(frames)):
        payload = json.loads(event.data)
        assert event.event == payload["type"], event
        payloads.append(payload)
    return payloads


def validate_events(payloads: list[dict[str, Any]]) -> None:
    """Each event as the anthropic SDK types it, strictly (ping has no type there)."""
    for payload in payloads:
        if payload["type"] != "ping":
            EVENTS.validate_python(payload, strict=True)
