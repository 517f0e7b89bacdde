"""Month spend recovered from usage_records in SQLite (the embedded default)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from fakeredis.aioredis import FakeRedis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.limits import Limiter, MemoryLimiter, RedisLimiter, load_month_spend, reconcile
from gateway.limits.spend import to_units
from gateway.metering.buffer import MemoryBuffer
from gateway.metering.events import UsageEvent
from gateway.metering.writer import UsageWriter
from tests.unit.limits.conftest import NOV_3, Clock
from tests.unit.metering.conftest import EventFactory

Sessions = async_sessionmaker[AsyncSession]
OCT_31_LATE = datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC).timestamp()
DEC_1 = datetime(2026, 12, 1, tzinfo=UTC).timestamp()


async def write(sessions: Sessions, events: list[UsageEvent]) -> None:
    buffer = MemoryBuffer()
    for event in events:
        await buffer.append(event)
    await UsageWriter(buffer, sessions, batch_size=50).flush()


def month_of_costs(make_event: EventFactory) -> list[UsageEvent]:
    events = [
        make_event(
            created_at=NOV_3 + i, team_id="team_a", key_id=f"key_a{i % 2}", cost=Decimal("0.0000001234") * i
        )
        for i in range(1, 101)
    ]
    events.append(make_event(created_at=NOV_3, team_id="team_b", key_id="key_b", cost=Decimal("12.5")))
    events.append(make_event(created_at=OCT_31_LATE, team_id="team_a", key_id="key_a0", cost=Decimal(1)))
    events.append(make_event(created_at=DEC_1, team_id="team_a", key_id="key_a0", cost=Decimal(1)))
    return events


async def test_load_month_spend_sums_the_months_records_exactly(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    await write(sqlite_sessions, month_of_costs(make_event))

    async with sqlite_sessions() as session:
        spend = await load_month_spend(session, NOV_3 + 86_400)

    odd = sum((Decimal("0.0000001234") * i for i in range(1, 101, 2)), Decimal(0))
    even = sum((Decimal("0.0000001234") * i for i in range(2, 101, 2)), Decimal(0))
    assert spend.month == "2026-11"
    assert spend.teams == {"team_a": to_units(odd + even), "team_b": to_units(Decimal("12.5"))}
    assert spend.keys == {
        "key_a0": to_units(even),
        "key_a1": to_units(odd),
        "key_b": to_units(Decimal("12.5")),
    }


async def test_an_empty_month_is_empty(sqlite_sessions: Sessions) -> None:
    async with sqlite_sessions() as session:
        spend = await load_month_spend(session, NOV_3)

    assert (spend.teams, spend.keys) == ({}, {})


async def test_reconcile_seeds_both_limiters(sqlite_sessions: Sessions, make_event: EventFactory) -> None:
    await write(sqlite_sessions, month_of_costs(make_event))
    clock = Clock()
    redis = FakeRedis()
    limiters: list[Limiter] = [MemoryLimiter(clock), RedisLimiter(redis, clock)]

    for limiter in limiters:
        await reconcile(limiter, sqlite_sessions, clock.now)

    for limiter in limiters:
        assert await limiter.spent_usd("team", "team_b", "2026-11") == Decimal("12.5")
        assert await limiter.spent_usd("key", "key_a0", "2026-10") == 0  # other months not loaded
    await redis.aclose()
