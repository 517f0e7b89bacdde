"""The daily totals (usage_daily) on PostgreSQL and SQLite: kept equal to the records by every
statement that writes them, and reports over any range, whole days or cut ones, exactly the sum
of the records in it."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest
from alembic import command
from sqlalchemy import delete, insert, inspect, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageDaily, UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent
from gateway.metering.reports.usage import GroupField, UsageQuery, UsageRow, usage_report
from gateway.metering.storage.writer import record_row
from tests.integration.metering.conftest import (
    create_database,
    drop_database,
    fresh_pg_engine,
    pg_url,
    write_before_tiers,
)
from tests.integration.metering.test_reports_backends import expected_rows, fill
from tests.unit.db.test_migrate import migrate
from tests.unit.metering.conftest import EventFactory

Sessions = async_sessionmaker[AsyncSession]
DATABASE = "gateway_test_metering_daily"
DAY = 86_400
DAY_ONE = datetime(2026, 3, 1, tzinfo=UTC).timestamp()
# moments on four UTC days, on and either side of their midnights
MOMENTS = (-DAY + 3600.25, -1, -0.000001, 0, 0.5, 43_200, DAY - 0.000001, DAY, 2 * DAY + 7.75, 3 * DAY + 1)
PARAMS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]


async def _database(kind: str, tmp_path: Path, revision: str | None = None) -> str:
    """A fresh database's URL, migrated to head or to `revision`."""
    if kind == "postgresql":
        await create_database(DATABASE)
        url = pg_url(DATABASE)
    else:
        url = f"sqlite:///{tmp_path / 'daily.db'}"
    if revision is None:
        await upgrade_head_async(url)
    else:
        await migrate(url, command.upgrade, revision)
    return url


@pytest.fixture(params=PARAMS)
async def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sessions]:
    if request.param == "postgresql":
        engine = await fresh_pg_engine(DATABASE)
    else:
        engine = create_engine(await _database("sqlite", tmp_path))
    yield session_factory(engine)
    await engine.dispose()
    if request.param == "postgresql":
        await drop_database(DATABASE)


def spread_dataset(make_event: EventFactory) -> list[UsageEvent]:
    """Two teams, keys, models, batches, over MOMENTS; costs down to the last of the ten places."""
    costs = itertools.cycle([Decimal("0.0000000001"), Decimal("0.3"), Decimal("0.0123456789"), Decimal(7)])
    combos = itertools.product(
        [("team_a", "key_a1"), ("team_a", "key_a2"), ("team_b", "key_b1")],
        [("gpt-4o", "openai-us", "us-east"), ("claude", "anthropic-eu", "eu-west")],
        [None, "batch-1"],
        MOMENTS,
    )
    events = []
    for n, ((team, key), (model, provider, region), batch, moment) in enumerate(combos):
        cost = next(costs)
        events.append(
            make_event(
                created_at=DAY_ONE + moment,
                team_id=team,
                key_id=key,
                model=model,
                provider=provider,
                region=region,
                batch_id=batch,
                prompt_tokens=500 + n,
                completion_tokens=n,
                cached_tokens=n % 11,
                cache_write_tokens=n % 3,
                cost=cost,
                uncached_cost=cost + Decimal("0.0000000007") * (n % 4),
            )
        )
    return events


def daily_of(events: Sequence[UsageEvent]) -> dict[tuple[object, ...], tuple[object, ...]]:
    """usage_daily as it should be: the events' totals per day and group, money in 1e-10 USD."""
    totals: dict[tuple[object, ...], list[int]] = defaultdict(lambda: [0] * 7)
    for e in events:
        day = datetime.fromtimestamp(e.created_at, UTC).date()
        group = (day, e.team_id, e.key_id, e.model, e.provider, e.region, e.batch_id or "")
        shares = (1, e.prompt_tokens, e.completion_tokens, e.cached_tokens, e.cache_write_tokens)
        money = (int(e.cost.scaleb(10)), int(e.uncached_cost.scaleb(10)))
        totals[group] = [a + b for a, b in zip(totals[group], (*shares, *money), strict=True)]
    return {group: tuple(values) for group, values in totals.items()}


async def stored_daily(sessions: Sessions) -> dict[tuple[object, ...], tuple[object, ...]]:
    d = UsageDaily.__table__.c
    group = (d.day, d.team_id, d.key_id, d.model, d.provider, d.region, d.batch_id)
    totals = (d.requests, d.prompt_tokens, d.completion_tokens, d.cached_tokens, d.cache_write_tokens)
    async with sessions() as session:
        rows = await session.execute(select(*group, *totals, d.cost_units, d.uncached_cost_units))
    return {tuple(row[:7]): tuple(int(value) for value in row[7:]) for row in rows}


def within(events: Sequence[UsageEvent], start: datetime | None, end: datetime | None) -> list[UsageEvent]:
    """The events in [start, end), each at the moment its record holds (to the microsecond)."""
    stored = [(datetime.fromtimestamp(e.created_at, UTC), e) for e in events]
    return [e for at, e in stored if (start is None or at >= start) and (end is None or at < end)]


def expected(events: Sequence[UsageEvent], group_by: tuple[GroupField, ...]) -> list[UsageRow]:
    """The report's rows; with no group-by, one row of totals even over no records."""
    return expected_rows(list(events), group_by) or ([UsageRow()] if not group_by else [])


def moment(offset_s: float) -> datetime:
    return datetime.fromtimestamp(DAY_ONE + offset_s, UTC)


async def test_the_daily_totals_are_the_records_totals(sessions: Sessions, make_event: EventFactory) -> None:
    events = spread_dataset(make_event)
    await fill(sessions, events)

    assert await stored_daily(sessions) == daily_of(events)


async def test_a_retried_write_counts_each_record_once(sessions: Sessions, make_event: EventFactory) -> None:
    events = spread_dataset(make_event)
    await fill(sessions, events[::2])
    await fill(sessions, events)  # half of these are stored already: the idempotent path
    await fill(sessions, events[:10])  # all of these are

    assert await stored_daily(sessions) == daily_of(events)
    async with sessions() as session:
        rows = await usage_report(session, UsageQuery(group_by=("day", "team", "batch")))
    assert rows == expected(events, ("day", "team", "batch"))


async def test_records_inserted_by_any_statement_are_in_the_daily_totals(
    sessions: Sessions, make_event: EventFactory
) -> None:
    """A plain multi-row INSERT (as the batch ledger writes a job's lines), not the writer."""
    events = spread_dataset(make_event)
    async with sessions() as session:
        await session.execute(insert(UsageRecord), [record_row(e) for e in events[:40]])
        await session.execute(insert(UsageRecord).values(record_row(events[40])))
        await session.commit()
    await fill(sessions, events[41:])

    assert await stored_daily(sessions) == daily_of(events)


async def test_deleted_and_changed_records_leave_the_daily_totals(
    sessions: Sessions, make_event: EventFactory
) -> None:
    events = spread_dataset(make_event)
    await fill(sessions, events)
    records = UsageRecord.__table__.c
    moved = {e.request_id for e in events if e.team_id == "team_a" and e.batch_id is None}
    gone = {e.request_id for e in events if e.key_id == "key_b1" and e.created_at < DAY_ONE + DAY}

    async with sessions() as session:
        await session.execute(delete(UsageRecord).where(records.request_id.in_(gone)))
        await session.execute(
            update(UsageRecord).where(records.request_id.in_(moved)).values(model="renamed", prompt_tokens=1)
        )
        await session.commit()

    changed = [
        e if e.request_id not in moved else msgspec.structs.replace(e, model="renamed", prompt_tokens=1)
        for e in events
        if e.request_id not in gone
    ]
    daily = await stored_daily(sessions)
    assert daily == daily_of(changed)
    assert all(totals[0] > 0 for totals in daily.values())  # a group with no record left is removed
    async with sessions() as session:
        rows = await usage_report(session, UsageQuery(group_by=("model", "key", "day")))
    assert rows == expected(changed, ("model", "key", "day"))


@pytest.mark.integration
async def test_truncating_the_records_empties_the_daily_totals(make_event: EventFactory) -> None:
    engine = await fresh_pg_engine(DATABASE)
    sessions = session_factory(engine)
    await fill(sessions, spread_dataset(make_event))
    async with sessions() as session:
        await session.execute(text("TRUNCATE usage_records"))
        await session.commit()

    daily = await stored_daily(sessions)
    await engine.dispose()
    await drop_database(DATABASE)
    assert daily == {}


# (start, end) offsets from DAY_ONE, in seconds; None: unbounded
RANGES = [
    (None, None),
    (0, DAY),  # one whole day
    (-DAY, 3 * DAY),  # whole days only
    (0.5, DAY - 0.000001),  # within one day
    (-1, DAY + 1),  # a second either side of a whole day
    (43_200, 2 * DAY + 8),  # cut days at both ends around a whole one
    (None, DAY + 0.25),  # open start, cut end
    (-0.000001, None),  # cut start, open end
    (-DAY + 3600.25, -1),  # exact record moments as bounds: start inclusive, end exclusive
    (2 * DAY, 0),  # end before start
    (DAY, DAY),  # empty
]


@pytest.mark.parametrize(("start", "end"), RANGES)
async def test_reports_over_any_range_are_exact(
    sessions: Sessions, make_event: EventFactory, start: float | None, end: float | None
) -> None:
    events = spread_dataset(make_event)
    await fill(sessions, events)
    start_at = None if start is None else moment(start)
    end_at = None if end is None else moment(end)
    wanted = within(events, start_at, end_at)

    async with sessions() as session:
        for group_by in ((), ("day",), ("team", "model"), ("key", "provider", "region", "batch", "day")):
            query = UsageQuery(start=start_at, end=end_at, group_by=group_by)
            assert await usage_report(session, query) == expected(wanted, group_by), group_by
        filtered = UsageQuery(
            start=start_at, end=end_at, group_by=("day",), team_id="team_a", batch="batch-1"
        )
        rows = await usage_report(session, filtered)
    in_batch = [e for e in wanted if (e.team_id, e.batch_id) == ("team_a", "batch-1")]
    assert rows == expected(in_batch, ("day",))


async def test_reports_and_daily_totals_split_by_tier(sessions: Sessions, make_event: EventFactory) -> None:
    """Per day, model and tier (what a provider's bill is compared with), from whole days and cut ones."""
    tiers = itertools.cycle([None, "flex", "priority", "default", "flex"])
    events = [msgspec.structs.replace(e, service_tier=next(tiers)) for e in spread_dataset(make_event)]
    await fill(sessions, events)
    d = UsageDaily.__table__.c
    async with sessions() as session:
        daily = await session.execute(select(d.day, d.model, d.service_tier, d.requests, d.cost_units))
        by_tier: dict[tuple[object, ...], list[int]] = defaultdict(lambda: [0, 0])
        for row in daily:
            totals = by_tier[(row.day, row.model, row.service_tier)]
            totals[0] += row.requests
            totals[1] += int(row.cost_units)
        for start, end in ((None, None), (0, DAY), (0.25, 2 * DAY + 8)):
            start_at = None if start is None else moment(start)
            end_at = None if end is None else moment(end)
            for group_by in (("tier",), ("day", "model", "tier")):
                query = UsageQuery(start=start_at, end=end_at, group_by=group_by)
                wanted = within(events, start_at, end_at)
                assert await usage_report(session, query) == expected(wanted, group_by), (start, group_by)
    wanted_daily: dict[tuple[object, ...], list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        totals = wanted_daily[
            (datetime.fromtimestamp(e.created_at, UTC).date(), e.model, e.service_tier or "")
        ]
        totals[0] += 1
        totals[1] += int(e.cost.scaleb(10))
    assert dict(by_tier) == dict(wanted_daily)


async def test_random_ranges_and_filters_add_up(sessions: Sessions, make_event: EventFactory) -> None:
    events = spread_dataset(make_event)
    await fill(sessions, events)
    rng = random.Random(7)
    fields: tuple[GroupField, ...] = ("team", "key", "model", "provider", "region", "batch", "day")
    filters = {"team_id": "team_b", "key_id": "key_a2", "model": "claude", "provider": "openai-us"}

    async with sessions() as session:
        for _ in range(40):
            bounds = sorted(rng.uniform(-1.5 * DAY, 4 * DAY) for _ in range(2))
            start, end = moment(bounds[0]), moment(bounds[1])
            group_by = tuple(rng.sample(fields, rng.randrange(len(fields) + 1)))
            name, value = rng.choice(sorted(filters.items()))
            query = UsageQuery(start=start, end=end, group_by=group_by, **{name: value})
            wanted = [e for e in within(events, start, end) if getattr(e, name) == value]
            assert await usage_report(session, query) == expected(wanted, group_by), query


@pytest.mark.parametrize("kind", PARAMS)
async def test_the_upgrade_fills_the_daily_totals_from_existing_records(
    kind: str, tmp_path: Path, make_event: EventFactory
) -> None:
    url = await _database(kind, tmp_path, revision="0006")
    engine = create_engine(url)
    sessions = session_factory(engine)
    events = spread_dataset(make_event)
    await write_before_tiers(sessions, events)  # no daily totals yet: none are kept before 0007

    await upgrade_head_async(url)
    backfilled = await stored_daily(sessions)
    later = make_event(created_at=DAY_ONE + 5, team_id="team_c")
    await fill(sessions, [later])
    kept = await stored_daily(sessions)
    await migrate(url, command.downgrade, "0006")
    async with engine.begin() as connection:
        tables = await connection.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    await write_before_tiers(sessions, [make_event()])  # the triggers went with the table: it writes
    await engine.dispose()
    if kind == "postgresql":
        await drop_database(DATABASE)

    assert backfilled == daily_of(events)
    assert kept == daily_of([*events, later])
    assert "usage_daily" not in tables
