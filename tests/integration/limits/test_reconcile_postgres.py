"""Month spend recovered from usage_records in PostgreSQL into a cold Redis."""

from __future__ import annotations

from decimal import Decimal

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.limits import RedisLimiter, reconcile
from gateway.limits.spend import to_units
from gateway.metering.buffer import MemoryBuffer
from gateway.metering.writer import UsageWriter
from tests.unit.limits.conftest import NOV_3, Clock
from tests.unit.metering.conftest import EventFactory

pytestmark = pytest.mark.integration


async def test_a_cold_redis_gets_the_months_spend_back(
    pg_sessions: async_sessionmaker[AsyncSession], redis_pair: tuple[Redis, Redis], make_event: EventFactory
) -> None:
    costs = [Decimal("0.0000004321") * i for i in range(1, 301)]
    buffer = MemoryBuffer()
    for i, cost in enumerate(costs):
        await buffer.append(make_event(created_at=NOV_3 + i, key_id=f"key_{i % 3}", cost=cost))
    await buffer.append(make_event(created_at=NOV_3 - 5 * 86_400, cost=Decimal(100)))  # October
    await UsageWriter(buffer, pg_sessions, batch_size=100).flush()
    limiter = RedisLimiter(redis_pair[0], Clock())

    spend = await reconcile(limiter, pg_sessions, NOV_3 + 3600)

    assert spend.teams == {"team_a": to_units(sum(costs, Decimal(0)))}
    assert sum(spend.keys.values()) == to_units(sum(costs, Decimal(0)))
    assert await limiter.spent_usd("team", "team_a", "2026-11") == sum(costs, Decimal(0))
    assert await limiter.spent_usd("key", "key_1", "2026-11") == sum(costs[1::3], Decimal(0))
