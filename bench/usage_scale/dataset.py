"""The benchmark's usage records: many teams, keys, models, providers, regions and batches over
the last DAYS days up to now, generated from a fixed seed so that every run loads the same shape.

Every record is a `UsageEvent`, priced from its tokens like the gateway prices them, so that it
goes into the database the way the writer puts a real one there.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gateway.metering.events import UsageEvent, UsageSource

DAYS = 90
TEAMS = 20
KEYS_PER_TEAM = 3
BATCH_SHARE = 0.3  # of the records, sent under a batch id
BATCHES_PER_TEAM_DAY = 2
SEED = 20_260_301
_MILLION = Decimal(1_000_000)
_DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class Deployment:
    model: str
    provider: str
    region: str
    upstream_model: str
    input_price: Decimal  # USD per million tokens
    output_price: Decimal
    cached_price: Decimal


DEPLOYMENTS = (
    Deployment("gpt-4o", "openai-us", "us-east", "gpt-4o-2024-08-06", Decimal("2.5"), Decimal(10), Decimal("1.25")),
    Deployment("gpt-4o", "azure-eu", "eu-west", "gpt-4o", Decimal("2.75"), Decimal(11), Decimal("1.375")),
    Deployment("gpt-4o-mini", "openai-us", "us-east", "gpt-4o-mini", Decimal("0.15"), Decimal("0.6"), Decimal("0.075")),
    Deployment("claude-sonnet", "anthropic-us", "us-east", "claude-sonnet-4", Decimal(3), Decimal(15), Decimal("0.3")),
    Deployment("claude-sonnet", "bedrock-eu", "eu-west", "claude-sonnet-4", Decimal(3), Decimal(15), Decimal("0.3")),
    Deployment("claude-haiku", "anthropic-us", "us-east", "claude-haiku-4", Decimal("0.8"), Decimal(4), Decimal("0.08")),
    Deployment("llama-70b", "vllm-local", "local", "llama-3.3-70b", Decimal("0.2"), Decimal("0.2"), Decimal("0.02")),
    Deployment("qwen-32b", "vllm-local", "local", "qwen-2.5-32b", Decimal("0.1"), Decimal("0.1"), Decimal("0.01")),
)  # fmt: skip


def day_zero(now: float | None = None) -> float:
    """Midnight UTC of the first day: DAYS days up to and including today."""
    today = int((time.time() if now is None else now) // _DAY_S) * _DAY_S
    return float(today - (DAYS - 1) * _DAY_S)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A team and its keys, as the database holds them (the records name their ids)."""

    team_id: str
    key_ids: tuple[str, ...]


def events(count: int, start: float, tenants: Sequence[Tenant], seed: int = SEED) -> Iterator[UsageEvent]:
    """`count` records spread evenly over DAYS days from `start`, in time order."""
    rng = random.Random(seed)
    span = DAYS * _DAY_S
    for n in range(count):
        team = rng.randrange(len(tenants))
        # each team keeps to a few deployments, so a report has the spread a real one has
        deployment = DEPLOYMENTS[(team + rng.choice((0, 0, 1, 3))) % len(DEPLOYMENTS)]
        moment = start + span * n / count
        yield _event(rng, f"req_{seed}_{n:09d}", moment, tenants[team], team, deployment)


def _event(
    rng: random.Random, request_id: str, moment: float, tenant: Tenant, team: int, deployment: Deployment
) -> UsageEvent:
    day = int(moment // _DAY_S)
    batch_id = None
    if rng.random() < BATCH_SHARE:
        batch_id = f"batch-{team:02d}-{day}-{rng.randrange(BATCHES_PER_TEAM_DAY)}"
    prompt = rng.randrange(50, 8000)
    cached = rng.choice((0, 0, prompt // 2, prompt - prompt % 1024))
    completion = rng.randrange(1, 1500)
    uncached_cost = (prompt * deployment.input_price + completion * deployment.output_price) / _MILLION
    cost = (
        (prompt - cached) * deployment.input_price
        + cached * deployment.cached_price
        + completion * deployment.output_price
    ) / _MILLION
    failed = rng.random() < 0.01
    return UsageEvent(
        request_id=request_id,
        created_at=moment,
        team_id=tenant.team_id,
        key_id=rng.choice(tenant.key_ids),
        model=deployment.model,
        provider=deployment.provider,
        region=deployment.region,
        deployment=f"{deployment.provider}/{deployment.model}",
        upstream_model=deployment.upstream_model,
        endpoint="chat/completions",
        status=502 if failed else 200,
        batch_id=batch_id,
        prompt_tokens=0 if failed else prompt,
        completion_tokens=0 if failed else completion,
        cached_tokens=0 if failed else cached,
        usage_source=UsageSource.NONE if failed else UsageSource.UPSTREAM,
        cost=Decimal(0) if failed else cost.quantize(Decimal("1e-10")),
        uncached_cost=Decimal(0) if failed else uncached_cost.quantize(Decimal("1e-10")),
        latency_ms=rng.uniform(200, 9000),
        ttft_ms=rng.uniform(50, 900),
        error_code="upstream_error" if failed else None,
        queue_ms=rng.uniform(0, 50),
    )
