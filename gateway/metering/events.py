"""The usage event: one frozen record per request that reached an upstream."""

from __future__ import annotations

from decimal import Decimal
from enum import Enum

import msgspec


class UsageSource(str, Enum):
    UPSTREAM = "upstream"  # the provider reported the counts
    ESTIMATED = "estimated"  # counted by the gateway (e.g. a stream the client abandoned)
    NONE = "none"  # no tokens (an upstream error before any output)


class UsageEvent(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    created_at: float  # unix seconds, when the request arrived
    team_id: str
    key_id: str
    model: str
    provider: str
    region: str
    deployment: str
    upstream_model: str
    endpoint: str
    status: int
    batch_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    usage_source: UsageSource = UsageSource.NONE
    cost: Decimal = Decimal(0)
    # every prompt token at the input price (pricing.Tariff.uncached_cost)
    uncached_cost: Decimal = Decimal(0)
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    error_code: str | None = None
    # the wait for capacity in the gateway's queue, before the request was sent upstream; last, and
    # defaulted, so that events buffered before it existed still decode (None: not measured)
    queue_ms: float | None = None
    # the client's own X-Request-ID (gateway.proxy.correlation); defaulted, like queue_ms
    client_request_id: str | None = None
    # the id of the Response an upstream that stores Responses returned (the Responses API served
    # natively): the writer records its team as its owner (gateway.db.response_owners); defaulted
    response_id: str | None = None
