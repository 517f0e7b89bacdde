"""The usage event: one frozen record per request that reached an upstream, and its one builder
(`usage_event`), which every path that meters (the proxy, a job's lines, count_tokens) calls."""

from __future__ import annotations

from decimal import Decimal
from enum import Enum
from typing import Protocol

import msgspec

from gateway.metering.pricing import Tariff
from gateway.providers.base import TokenUsage
from gateway.settings import Provider


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
    # the service tier the request was priced at: the one the upstream said it served, else the
    # one the client asked for (gateway.metering.pricing.Tariff.tier); None: neither; defaulted
    service_tier: str | None = None


class ServedBy(Protocol):
    """Where a request was served: a `gateway.routing.deployment.Deployment` (read through this
    Protocol, as routing imports its prices from metering)."""

    @property
    def id(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> Provider: ...

    @property
    def upstream_model(self) -> str: ...

    @property
    def region(self) -> str: ...


def usage_event(
    request_id: str,
    *,
    created_at: float,
    team_id: str,
    key_id: str,
    deployment: ServedBy,
    endpoint: str,
    status: int,
    usage: TokenUsage | None,
    source: UsageSource,
    tariff: Tariff | None,
    cost: Decimal | None = None,
    batch_id: str | None = None,
    latency_ms: float = 0.0,
    ttft_ms: float | None = None,
    error_code: str | None = None,
    queue_ms: float | None = None,
    client_request_id: str | None = None,
    response_id: str | None = None,
    service_tier: str | None = None,
) -> UsageEvent:
    """The record of one request served by `deployment`: its counts (`usage`; None: no tokens, and
    then no source either) priced at `tariff` (None: not billed, as a count is not) for its
    `service_tier` (the tier served, else the one asked for). `cost`: what the answer itself said
    `usage` costs, recorded as it is."""
    tokens = usage or TokenUsage()
    service_tier = recorded_tier(service_tier)
    if tariff is None:
        cost, uncached_cost = Decimal(0), Decimal(0)
    else:
        tariff = tariff.tier(service_tier)
        cost, uncached_cost = tariff.cost(tokens) if cost is None else cost, tariff.uncached_cost(tokens)
    return UsageEvent(
        request_id=request_id,
        created_at=created_at,
        team_id=team_id,
        key_id=key_id,
        model=deployment.model,
        provider=deployment.provider.name,
        region=deployment.region,
        deployment=deployment.id,
        upstream_model=deployment.upstream_model,
        endpoint=endpoint,
        status=status,
        batch_id=batch_id,
        prompt_tokens=tokens.prompt_tokens,
        completion_tokens=tokens.completion_tokens,
        cached_tokens=tokens.cached_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
        usage_source=source if usage is not None else UsageSource.NONE,
        cost=cost,
        uncached_cost=uncached_cost,
        latency_ms=latency_ms,
        ttft_ms=ttft_ms,
        error_code=error_code,
        queue_ms=queue_ms,
        client_request_id=client_request_id,
        response_id=response_id,
        service_tier=service_tier,
    )


MAX_TIER_LENGTH = 16  # usage_records.service_tier


def recorded_tier(name: object) -> str | None:
    """A tier name as a record keeps it: a short string as the upstream or client said it, else
    None (a value that is no tier name at all is not kept)."""
    if not isinstance(name, str) or not name or len(name) > MAX_TIER_LENGTH:
        return None
    return name
