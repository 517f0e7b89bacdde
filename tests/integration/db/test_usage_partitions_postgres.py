"""usage_records partitioned by month (migration 0008) on real PostgreSQL: the upgrade of a table
with records in it, the upkeep that creates months ahead (also several at once), records far off
in time, duplicates across the upgrade, retention, and the reports over all of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import structlog
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.errors import InvalidRequest
from gateway.metering.events import UsageEvent
from gateway.metering.reports.usage import UsageQuery, UsageRow, usage_events, usage_report
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.partitions import (
    DEFAULT_PARTITION,
    add_months,
    ensure_partitions,
    month_of,
    month_partitions,
)
from gateway.metering.storage.retention import records_from
from gateway.metering.storage.upkeep import UsageUpkeep, keep_usage_storage
from gateway.metering.storage.writer import UsageWriter
from tests.integration.db.test_migrate_postgres import schema_diffs
from tests.integration.metering.conftest import create_database, drop_database, pg_url, write_before_tiers
from tests.unit.db.test_migrate import migrate
from tests.unit.metering.conftest import EventFactory

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_partitions_db"
LOG = structlog.get_logger("tests.partitions")
MARCH_15 = datetime(2026, 3, 15, tzinfo=UTC).timestamp()
DAY = 86_400.0


def at(year: int, month: int, day: int, hour: int = 12) -> float:
    return datetime(year, month, day, hour, tzinfo=UTC).timestamp()


def months(names: list[str]) -> list[str]:
    return sorted(name for name in names if name != DEFAULT_PARTITION)


# usage_daily's columns before migration 0013 split it by tier (a cached `SELECT *` would not
# survive the new column)
DAILY_BEFORE_TIERS = (
    "SELECT day, team_id, key_id, model, provider, region, batch_id, requests, prompt_tokens, "
    "completion_tokens, cached_tokens, cache_write_tokens, cost_units, uncached_cost_units "
    "FROM usage_daily ORDER BY 1, 2, 3"
)


async def write(sessions: async_sessionmaker[AsyncSession], events: list[UsageEvent]) -> None:
    buffer = MemoryBuffer()
    for event in events:
        await buffer.append(event)
    await UsageWriter(buffer, sessions).flush()


async def partition_names(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'usage_records'::regclass"
            )
        )
        return sorted(rows.scalars())


async def rows_in(engine: AsyncEngine, table: str) -> int:
    async with engine.connect() as connection:
        return int(await connection.scalar(text(f"SELECT count(*) FROM {table}")) or 0)


async def report(sessions: async_sessionmaker[AsyncSession], query: UsageQuery) -> list[UsageRow]:
    async with sessions() as session:
        return await usage_report(session, query)


BY_TEAM_MODEL = UsageQuery(group_by=("team", "model"))
BY_DAY = UsageQuery(group_by=("day", "key"))
CUT = UsageQuery(
    start=datetime(2026, 3, 20, 6, tzinfo=UTC), end=datetime(2026, 5, 2, 18, tzinfo=UTC), group_by=("team",)
)


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    await create_database(DATABASE)
    await upgrade_head_async(pg_url(DATABASE))
    engine = create_engine(pg_url(DATABASE))
    yield engine
    await engine.dispose()
    await drop_database(DATABASE)


def spread(make_event: EventFactory, count: int, first: float = MARCH_15) -> list[UsageEvent]:
    """`count` events a day apart from `first`, over two teams and two models."""
    return [
        make_event(
            created_at=first + i * DAY + i,
            team_id=("team_a", "team_b")[i % 2],
            model=("gpt-4o", "gpt-4o-mini")[i % 3 % 2],
            key_id=f"key_{i % 5}",
            prompt_tokens=100 + i,
            cost=Decimal("0.0001234567") * (i + 1),
        )
        for i in range(count)
    ]


async def test_upgrade_moves_the_records_into_month_partitions_and_the_reports_agree(
    make_event: EventFactory,
) -> None:
    database = "gateway_test_partitions_upgrade"
    await create_database(database)
    url = pg_url(database)
    await migrate(url, command.upgrade, "0007")
    engine = create_engine(url)
    sessions = session_factory(engine)
    events = spread(make_event, 120)  # 2026-03-15 .. 2026-07-12
    await write_before_tiers(sessions, events)
    before = [await report(sessions, query) for query in (BY_TEAM_MODEL, BY_DAY)]
    async with engine.connect() as connection:
        daily_before = (await connection.execute(text(DAILY_BEFORE_TIERS))).all()

    try:
        await upgrade_head_async(url)
        after = [await report(sessions, query) for query in (BY_TEAM_MODEL, BY_DAY)]
        cut = await report(sessions, CUT)
        names = await partition_names(engine)
        async with engine.connect() as connection:
            daily_after = (await connection.execute(text(DAILY_BEFORE_TIERS))).all()
            diffs = await connection.run_sync(schema_diffs)
        march = await rows_in(engine, "usage_records_2026_03")
        await write(sessions, [events[0], events[-1], make_event(created_at=at(2026, 4, 1))])  # two again
        total = await rows_in(engine, "usage_records")
        after_writes = await report(sessions, UsageQuery())
    finally:
        await engine.dispose()
        await drop_database(database)

    assert after == before
    assert [(row.team_id, row.requests, row.prompt_tokens, row.cost) for row in cut] == cut_totals(events)
    assert daily_after == daily_before  # the copy counted nothing twice
    assert {"usage_records_2026_03", "usage_records_2026_07", DEFAULT_PARTITION} <= set(names)
    assert march == 17  # 15th to 31st
    assert total == 121  # the redelivered pair skipped across the upgrade
    assert after_writes[0].requests == 121
    assert diffs == []


def cut_totals(events: list[UsageEvent]) -> list[tuple[str, int, int, Decimal]]:
    """CUT's report, added up here from the events themselves."""
    assert CUT.start is not None and CUT.end is not None
    inside = [e for e in events if CUT.start.timestamp() <= e.created_at < CUT.end.timestamp()]
    teams = sorted({e.team_id for e in inside})
    return [
        (
            team,
            sum(1 for e in inside if e.team_id == team),
            sum(e.prompt_tokens for e in inside if e.team_id == team),
            sum((e.cost for e in inside if e.team_id == team), Decimal(0)),
        )
        for team in teams
    ]


async def test_upkeep_is_idempotent_and_safe_from_several_processes_at_once(engine: AsyncEngine) -> None:
    sessions = session_factory(engine)
    now = datetime(2031, 11, 20, tzinfo=UTC)

    async def upkeep() -> list[str]:
        async with sessions.begin() as session:
            return await ensure_partitions(session, now, 3)

    created = await asyncio.gather(*(upkeep() for _ in range(4)))
    again = await upkeep()

    assert sorted(name for names in created for name in names) == [
        "usage_records_2031_11", "usage_records_2031_12", "usage_records_2032_01", "usage_records_2032_02",
    ]  # fmt: skip
    assert again == []
    async with sessions() as session:
        listed = [partition.name for partition in await month_partitions(session)]
    assert listed[-4:] == ["usage_records_2031_11", "usage_records_2031_12", "usage_records_2032_01",
                           "usage_records_2032_02"]  # fmt: skip


async def test_records_far_off_in_time_land_in_the_default_partition_and_move_into_their_month(
    engine: AsyncEngine, make_event: EventFactory
) -> None:
    sessions = session_factory(engine)
    far = [make_event(created_at=at(1999, 1, 5)), make_event(created_at=at(2090, 6, 7)),
           make_event(created_at=at(2090, 6, 8))]  # fmt: skip
    await write(sessions, far)
    await write(sessions, far[1:])  # delivered again: still skipped in the DEFAULT partition
    in_default = await rows_in(engine, DEFAULT_PARTITION)
    daily = await report(sessions, UsageQuery(group_by=("day",)))

    done = await keep_usage_storage(
        sessions, UsageUpkeep(months_ahead=0), now=datetime(2090, 6, 1, tzinfo=UTC)
    )
    await write(sessions, far[1:])  # and again, now that June 2090 has its partition

    assert in_default == 3
    assert done.created == ["usage_records_2090_06"]
    assert await rows_in(engine, DEFAULT_PARTITION) == 1  # 1999 stays there
    assert await rows_in(engine, "usage_records_2090_06") == 2
    assert await report(sessions, UsageQuery(group_by=("day",))) == daily  # moved, not counted again


async def test_retention_drops_only_months_usage_daily_covers_and_whole_days_stay(
    engine: AsyncEngine, make_event: EventFactory
) -> None:
    sessions = session_factory(engine)
    await keep_usage_storage(sessions, UsageUpkeep(months_ahead=0), now=datetime(2026, 3, 1, tzinfo=UTC))
    for month in (4, 5, 6, 7):
        await keep_usage_storage(
            sessions, UsageUpkeep(months_ahead=0), now=datetime(2026, month, 1, tzinfo=UTC)
        )
    await write(sessions, spread(make_event, 120))  # 2026-03-15 .. 2026-07-12
    whole_days = UsageQuery(end=datetime(2026, 7, 1, tzinfo=UTC), group_by=("team", "model", "day"))
    before = await report(sessions, whole_days)
    async with engine.begin() as connection:  # May's totals no longer match its records
        await connection.execute(
            text("UPDATE usage_daily SET requests = requests + 1 WHERE day = '2026-05-03'")
        )

    # 2 months before August: March to May may go, but May does not add up, so May and June stay
    done = await keep_usage_storage(
        sessions, UsageUpkeep(months_ahead=0, retention_months=2), now=datetime(2026, 8, 10, tzinfo=UTC)
    )
    names = await partition_names(engine)
    async with sessions() as session:
        kept_from = await records_from(session)
    after = await report(sessions, whole_days)
    async with sessions() as session:
        with pytest.raises(InvalidRequest, match="no longer kept"):
            await usage_events(session, UsageQuery(start=datetime(2026, 3, 20, tzinfo=UTC)), None, 10)
        with pytest.raises(InvalidRequest, match="no longer kept"):
            await usage_report(session, CUT)
        kept_events, _ = await usage_events(
            session, UsageQuery(start=datetime(2026, 5, 1, tzinfo=UTC)), None, 500
        )

    assert done.dropped == ["usage_records_2026_03", "usage_records_2026_04"]
    assert "usage_records_2026_05" in names and "usage_records_2026_04" not in names
    assert kept_from == datetime(2026, 5, 1, tzinfo=UTC)
    assert _without_day(after, "2026-05-03") == _without_day(before, "2026-05-03")
    assert len(kept_events) == 73  # May 1st onwards: 2026-05-01 .. 2026-07-12


def _without_day(rows: list[UsageRow], day: str) -> list[UsageRow]:
    return [row for row in rows if row.day != day]


async def test_the_writer_creates_the_months_ahead_when_it_starts(engine: AsyncEngine) -> None:
    sessions = session_factory(engine)
    writer = UsageWriter(MemoryBuffer(), sessions, flush_interval_s=0.01, upkeep=UsageUpkeep(months_ahead=7))
    running = asyncio.create_task(writer.run())
    wanted = f"usage_records_{add_months(month_of(datetime.now(UTC)), 7):%Y_%m}"
    try:
        for _ in range(500):
            if wanted in await partition_names(engine):
                break
            await asyncio.sleep(0.02)
    finally:
        await writer.stop(drain_timeout_s=5)
        await running
    assert wanted in await partition_names(engine)
    assert running.done()


async def test_the_downgrade_puts_the_records_back_into_one_table(
    engine: AsyncEngine, make_event: EventFactory
) -> None:
    sessions = session_factory(engine)
    events = spread(make_event, 40)
    await write(sessions, events)
    before = await report(sessions, BY_DAY)

    await migrate(pg_url(DATABASE), command.downgrade, "0007")
    await write_before_tiers(
        sessions, [events[3], make_event(created_at=at(2026, 4, 30))]
    )  # one again, one new
    async with engine.connect() as connection:
        partitioned = await connection.scalar(
            text("SELECT count(*) FROM pg_partitioned_table WHERE partrelid = 'usage_records'::regclass")
        )
        daily = await connection.scalar(text("SELECT sum(requests) FROM usage_daily"))
    await upgrade_head_async(pg_url(DATABASE))

    assert partitioned == 0
    assert await rows_in(engine, "usage_records") == 41
    assert daily == 41  # the triggers are back on the plain table
    assert [row for row in await report(sessions, BY_DAY) if row.day != "2026-04-30"] == [
        row for row in before if row.day != "2026-04-30"
    ]
