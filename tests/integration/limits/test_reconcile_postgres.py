"""Month spend recovered from usage_records in PostgreSQL into a cold Redis: at start, or on demand."""

from __future__ import annotations

from decimal import Decimal

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.principal import Principal
from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError, QuotaExceeded, RateLimited, ServiceUnavailable
from gateway.limits import Admission, RecordedSpend, RedisLimiter, Reservation, reconcile
from gateway.limits.spend import to_units
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from tests.unit.limits.conftest import NOV_3, Clock, principal, usd
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
    assert await limiter.spent_usd("key", "key_1", "2026-11", "team_a") == sum(costs[1::3], Decimal(0))


async def test_a_budget_nearly_spent_still_refuses_after_redis_is_emptied(
    pg_sessions: async_sessionmaker[AsyncSession], redis_pair: tuple[Redis, Redis], make_event: EventFactory
) -> None:
    clock = Clock()
    limiter = RedisLimiter(redis_pair[0], clock, records=RecordedSpend(pg_sessions))
    who = principal(team_budget_usd=Decimal("0.10"))
    buffer = MemoryBuffer()
    for i in range(9):  # nine cents spent: counted in Redis and recorded in PostgreSQL
        admission = await limiter.admit(who, usd("0.01"))
        event = make_event(created_at=clock.now + i, team_id="team_a", key_id="key_a", cost=Decimal("0.01"))
        await limiter.settle(who, event, admission)
        await buffer.append(event)
    await UsageWriter(buffer, pg_sessions, batch_size=100).flush()

    await redis_pair[0].flushdb()  # as a Redis that keeps nothing on disk comes back from a restart

    tenth = await limiter.admit(who, usd("0.01"))  # the cent left, and no more
    assert isinstance(await reserved(limiter, who, usd("0.01")), RateLimited)
    await limiter.settle(who, make_event(created_at=clock.now, cost=Decimal("0.01")), tenth)
    assert isinstance(await reserved(limiter, who, usd("0.01")), QuotaExceeded)
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.10")


async def test_an_emptied_redis_and_an_unreachable_database_refuse_with_503(
    redis_pair: tuple[Redis, Redis],
) -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:1/nothing")  # nothing listens on port 1
    limiter = RedisLimiter(redis_pair[0], Clock(), records=RecordedSpend(session_factory(engine)))
    try:
        outcome = await reserved(limiter, principal(team_budget_usd=Decimal(1)), usd("0.01"))
        unbudgeted = await reserved(limiter, principal(team_rpm=5), usd("0.01"))
    finally:
        await engine.dispose()

    assert isinstance(outcome, ServiceUnavailable)
    assert isinstance(unbudgeted, Admission)


async def reserved(
    limiter: RedisLimiter, who: Principal, reservation: Reservation
) -> Admission | GatewayError:
    try:
        return await limiter.admit(who, reservation)
    except GatewayError as exc:
        return exc
