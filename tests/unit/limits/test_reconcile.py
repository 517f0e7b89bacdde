"""Month spend recovered from usage_records in SQLite (the embedded default): all, or one owner's."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fakeredis.aioredis import FakeRedis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.session import create_engine, session_factory
from gateway.errors import ServiceUnavailable
from gateway.limits import Limiter, MemoryLimiter, RecordedSpend, RedisLimiter, load_month_spend, reconcile
from gateway.limits.spend import to_units
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
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
        ("team_a", "key_a0"): to_units(even),
        ("team_a", "key_a1"): to_units(odd),
        ("team_b", "key_b"): to_units(Decimal("12.5")),
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
        assert await limiter.spent_usd("key", "key_a0", "2026-10", "team_a") == 0  # other months not loaded
    await redis.aclose()


async def test_recorded_spend_sums_one_owners_month(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    await write(sqlite_sessions, month_of_costs(make_event))
    records = RecordedSpend(sqlite_sessions)

    assert await records.month_units("team", "team_b", NOV_3) == to_units(Decimal("12.5"))
    assert await records.month_units("key", "key_a0", NOV_3) == to_units(
        sum((Decimal("0.0000001234") * i for i in range(2, 101, 2)), Decimal(0))
    )
    assert await records.month_units("team", "team_nobody", NOV_3) == 0


async def test_recorded_spend_without_a_database_is_503() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:1/nothing")  # nothing listens on port 1
    try:
        with pytest.raises(ServiceUnavailable) as raised:
            await RecordedSpend(session_factory(engine)).month_units("team", "team_a", NOV_3)
    finally:
        await engine.dispose()

    assert raised.value.status == 503
    assert "team team_a" in raised.value.message
