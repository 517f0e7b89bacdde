"""Fixtures for limiter unit tests: a settable clock, principals, usage records, and both limiters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import fakeredis
import pytest
from fakeredis.aioredis import FakeRedis

from gateway.auth.principal import Principal
from gateway.errors import ServiceUnavailable
from gateway.limits import Limiter, MemoryLimiter, RedisLimiter, Reservation
from gateway.limits.rebuild import SpendRecords
from gateway.limits.windows import Scope
from gateway.metering.events import UsageEvent, UsageSource
from tests.unit.metering.conftest import make_event, sqlite_sessions, sqlite_url  # noqa: F401  (shared fixtures)

NOV_3 = 1_793_664_000.0  # 2026-11-03T00:00:00Z


@dataclass
class Clock:
    now: float = NOV_3

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def principal(**limits: Any) -> Principal:
    return Principal(key_id="key_a", key_prefix="sk-gw-aaaa", team_id="team_a", team_name="a", **limits)


def usage_event(
    clock: Clock, prompt: int = 0, completion: int = 0, cost: str = "0", **fields: Any
) -> UsageEvent:
    values: dict[str, Any] = {
        "request_id": f"req_{clock.now}_{prompt}_{completion}_{cost}",
        "created_at": clock.now,
        "team_id": "team_a",
        "key_id": "key_a",
        "model": "chat",
        "provider": "up",
        "region": "us-east",
        "deployment": "up/chat",
        "upstream_model": "chat-1",
        "endpoint": "chat/completions",
        "status": 200,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "usage_source": UsageSource.UPSTREAM,
        "cost": Decimal(cost),
    }
    return UsageEvent(**(values | fields))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake_server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
async def fake_redis(fake_server: fakeredis.FakeServer) -> AsyncIterator[FakeRedis]:
    # Room for 200 admissions at once: past its pool's 100 redis-py raises MaxConnectionsError
    client = FakeRedis(server=fake_server, max_connections=1000)
    yield client
    await client.aclose()


def tokens(count: int) -> Reservation:
    return Reservation(tokens=count)


def usd(amount: str, count: int = 0) -> Reservation:
    """A reservation of `amount` USD (and `count` tokens)."""
    return Reservation(tokens=count, units=int(Decimal(amount).scaleb(10)))


@dataclass
class Records:
    """Usage records as SpendRecords reads them: units per (scope, owner); counts its queries."""

    units: dict[tuple[str, str], int] = field(default_factory=dict)
    queries: int = 0
    down: bool = False
    delay_s: float = 0.0

    async def month_units(self, scope: Scope, owner: str, now: float) -> int:
        self.queries += 1
        await asyncio.sleep(self.delay_s)
        if self.down:
            raise ServiceUnavailable("the database is down")
        return self.units.get((scope, owner), 0)


LimiterFactory = Callable[..., Limiter]


@pytest.fixture(params=["memory", "redis"])
def make_limiter(request: pytest.FixtureRequest, clock: Clock, fake_redis: FakeRedis) -> LimiterFactory:
    """Builds the limiter under test (keyword arguments: `records`, `hold_ttl_s`)."""

    def make(records: SpendRecords | None = None, **options: Any) -> Limiter:
        if request.param == "memory":
            return MemoryLimiter(clock, records=records, **options)
        return RedisLimiter(fake_redis, clock, records=records, **options)

    return make


@pytest.fixture
def limiter(make_limiter: LimiterFactory) -> Limiter:
    """Each behaviour test runs against both implementations: their semantics must agree."""
    return make_limiter()
