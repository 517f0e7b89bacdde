"""Usage reports on real PostgreSQL and on SQLite: totals checked against sums done in Python."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent
from gateway.metering.reports.batches import batch_totals
from gateway.metering.reports.usage import (
    ROW_FIELD,
    GroupField,
    UsageQuery,
    UsageRow,
    usage_events,
    usage_report,
)
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from tests.integration.metering.conftest import drop_database, fresh_pg_engine
from tests.unit.metering.conftest import EventFactory

Sessions = async_sessionmaker[AsyncSession]
DAY_ONE = datetime(2026, 3, 1, tzinfo=UTC).timestamp()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
async def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sessions]:
    if request.param == "postgresql":
        engine = await fresh_pg_engine()
    else:
        url = f"sqlite:///{tmp_path / 'reports.db'}"
        await upgrade_head_async(url)
        engine = create_engine(url)
    yield session_factory(engine)
    await engine.dispose()
    if request.param == "postgresql":
        await drop_database("gateway_test_metering")


def usage_dataset(make_event: EventFactory) -> list[UsageEvent]:
    """Two teams, keys, models, providers, regions, batches, and both sides of a UTC midnight."""
    events = []
    costs = itertools.cycle([Decimal("0.0000000001"), Decimal("0.1"), Decimal("0.0123456789"), Decimal("2")])
    combos = itertools.product(
        [("team_a", "key_a1"), ("team_a", "key_a2"), ("team_b", "key_b1")],
        [("gpt-4o", "openai-us", "us-east"), ("claude", "anthropic-eu", "eu-west")],
        [None, "batch-1"],
        [DAY_ONE - 1, DAY_ONE + 0.5, DAY_ONE + 86_399.999999],
    )
    for n, ((team, key), (model, provider, region), batch, moment) in enumerate(combos):
        cost = next(costs)
        events.append(
            make_event(
                created_at=moment,
                team_id=team,
                key_id=key,
                model=model,
                provider=provider,
                region=region,
                batch_id=batch,
                prompt_tokens=1000 + n,
                completion_tokens=n,
                cached_tokens=n % 7,
                cache_write_tokens=n % 3,
                cost=cost,
                uncached_cost=cost + Decimal("0.0000000003") * (n % 5),
            )
        )
    return events


def expected_rows(events: list[UsageEvent], group_by: tuple[GroupField, ...]) -> list[UsageRow]:
    def key_of(event: UsageEvent) -> tuple[str | None, ...]:
        day = datetime.fromtimestamp(event.created_at, UTC).strftime("%Y-%m-%d")
        values = {**{f: getattr(event, ROW_FIELD[f], None) for f in group_by}, "day": day}
        return tuple(values[f] for f in group_by)

    groups: dict[tuple[str | None, ...], UsageRow] = defaultdict(UsageRow)
    for event in events:
        row = groups[key_of(event)]
        row.requests += 1
        row.prompt_tokens += event.prompt_tokens
        row.completion_tokens += event.completion_tokens
        row.cached_tokens += event.cached_tokens
        row.cache_write_tokens += event.cache_write_tokens
        row.cost += event.cost
        row.saving += event.uncached_cost - event.cost
    rows = []
    for key in sorted(groups, key=lambda k: tuple((v is not None, v or "") for v in k)):
        for field, value in zip(group_by, key, strict=True):
            setattr(groups[key], ROW_FIELD[field], value)
        rows.append(groups[key])
    return rows


async def fill(sessions: Sessions, events: list[UsageEvent]) -> None:
    buffer = MemoryBuffer()
    for event in events:
        await buffer.append(event)
    await UsageWriter(buffer, sessions, batch_size=50).flush()


@pytest.mark.parametrize(
    "group_by",
    [(), ("team",), ("key", "model"), ("provider", "region"), ("batch",), ("day",), ("team", "day", "batch")],
)
async def test_report_totals_are_exact(
    sessions: Sessions, make_event: EventFactory, group_by: tuple[GroupField, ...]
) -> None:
    events = usage_dataset(make_event)
    await fill(sessions, events)

    async with sessions() as session:
        rows = await usage_report(session, UsageQuery(group_by=group_by))

    assert rows == expected_rows(events, group_by)


async def test_filters_and_time_window(sessions: Sessions, make_event: EventFactory) -> None:
    events = usage_dataset(make_event)
    await fill(sessions, events)
    paris = timezone(timedelta(hours=1))
    start = datetime(2026, 3, 1, 1, 0, tzinfo=paris)  # = midnight UTC
    query = UsageQuery(
        start=start, end=datetime(2026, 3, 2), team_id="team_a", model="claude", batch="batch-1"
    )

    async with sessions() as session:
        rows = await usage_report(session, dataclass_replace(query, group_by=("key",)))

    wanted = [
        e
        for e in events
        if DAY_ONE <= e.created_at < DAY_ONE + 86_400
        and (e.team_id, e.model, e.batch_id) == ("team_a", "claude", "batch-1")
    ]
    assert rows == expected_rows(wanted, ("key",))
    assert sum(row.requests for row in rows) == 4


async def test_batch_totals(sessions: Sessions, make_event: EventFactory) -> None:
    events = usage_dataset(make_event)
    await fill(sessions, events)
    in_batch = [e for e in events if e.team_id == "team_b" and e.batch_id == "batch-1"]

    async with sessions() as session:
        totals = await batch_totals(session, "team_b", "batch-1", since=None)
        later = await batch_totals(session, "team_b", "batch-1", since=datetime.fromtimestamp(DAY_ONE, UTC))
        unknown = await batch_totals(session, "team_a", "no-such-batch", since=None)

    assert totals.requests == len(in_batch)
    assert totals.cost == sum((e.cost for e in in_batch), Decimal(0))
    assert totals.cached_tokens == sum(e.cached_tokens for e in in_batch)
    assert later.requests == len([e for e in in_batch if e.created_at >= DAY_ONE])
    assert (unknown.requests, unknown.cost) == (0, 0)


async def test_cursor_pages_cover_every_record_once(sessions: Sessions, make_event: EventFactory) -> None:
    # Many records share a timestamp, so the request id must break ties.
    events = [
        make_event(created_at=DAY_ONE + n // 4, team_id="team_a" if n % 5 else "team_b") for n in range(103)
    ]
    await fill(sessions, events)
    query = UsageQuery(team_id="team_a")

    seen: list[str] = []
    cursor: str | None = None
    async with sessions() as session:
        while True:
            page, cursor = await usage_events(session, query, cursor, limit=7)
            assert len(page) <= 7
            seen.extend(row.request_id for row in page)
            if cursor is None:
                break

    wanted = sorted((e for e in events if e.team_id == "team_a"), key=lambda e: (e.created_at, e.request_id))
    assert seen == [e.request_id for e in wanted]
    assert page[-1].created_at.tzinfo is not None


async def test_event_rows_hold_what_was_metered(sessions: Sessions, make_event: EventFactory) -> None:
    event = make_event(cost=Decimal("0.0123456789"), latency_ms=1234.5, ttft_ms=88.25, error_code="x")
    await fill(sessions, [event])

    async with sessions() as session:
        (row,), cursor = await usage_events(session, UsageQuery(), None, limit=10)

    assert cursor is None
    assert row.created_at == datetime.fromtimestamp(event.created_at, UTC)
    assert (row.cost, row.latency_ms, row.ttft_ms, row.error_code) == (
        Decimal("0.0123456789"),
        1234.5,
        88.25,
        "x",
    )


def dataclass_replace(query: UsageQuery, **changes: object) -> UsageQuery:
    from dataclasses import replace

    return replace(query, **changes)  # type: ignore[arg-type]
