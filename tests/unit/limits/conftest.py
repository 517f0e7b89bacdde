"""Fixtures for limiter unit tests: a settable clock, principals, and both limiters on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import fakeredis
import pytest
from fakeredis.aioredis import FakeRedis

from gateway.auth.principal import Principal
from gateway.limits import Limiter, MemoryLimiter, RedisLimiter
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
    client = FakeRedis(server=fake_server)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest, clock: Clock, fake_redis: FakeRedis) -> Limiter:
    """Each behaviour test runs against both implementations: their semantics must agree."""
    if request.param == "memory":
        return MemoryLimiter(clock)
    return RedisLimiter(fake_redis, clock)
