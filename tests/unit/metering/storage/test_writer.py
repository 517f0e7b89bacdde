"""UsageWriter with the in-process buffer and a real SQLite database."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageDeadLetter, UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import (
    UsageWriter,
    dead_letter_count,
    describe_error,
    is_refused_record,
    record_row,
)
from tests.unit.metering.conftest import EventFactory

Sessions = async_sessionmaker[AsyncSession]


async def stored(sessions: Sessions) -> list[UsageRecord]:
    async with sessions() as session:
        return list((await session.scalars(select(UsageRecord).order_by(UsageRecord.created_at))).all())


async def eventually(condition: Callable[[], object], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_flush_writes_every_buffered_event(sqlite_sessions: Sessions, make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sqlite_sessions, batch_size=3)
    events = [make_event(cost=Decimal("0.0000001234"), batch_id="b1") for _ in range(7)]
    for event in events:
        await buffer.append(event)

    await writer.flush()

    records = await stored(sqlite_sessions)
    assert [r.request_id for r in records] == [e.request_id for e in events]
    assert records[0].cost == Decimal("0.0000001234")
    assert records[0].batch_id == "b1"
    assert writer.records_written == 7
    assert await buffer.depth() == 0


async def test_the_same_event_twice_is_one_record(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sqlite_sessions)
    event = make_event()
    await buffer.append(event)
    await buffer.append(event)  # both in one batch
    await writer.flush()
    await buffer.append(event)  # and again in a later batch, as after a retried commit
    await writer.flush()

    async with sqlite_sessions() as session:
        count = await session.scalar(select(func.count()).select_from(UsageRecord))
    assert count == 1
    assert await buffer.depth() == 0


async def test_writer_keeps_events_while_the_database_is_not_ready(
    tmp_path: Path, make_event: EventFactory
) -> None:
    url = f"sqlite:///{tmp_path / 'late.db'}"  # no tables yet: every insert fails
    engine = create_engine(url)
    sessions = session_factory(engine)
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sessions, flush_interval_s=0.01, backoff_base_s=0.01, backoff_max_s=0.05)
    events = [make_event() for _ in range(20)]
    for event in events:
        await buffer.append(event)
    running = asyncio.create_task(writer.run())

    await eventually(lambda: writer.last_error is not None)
    assert "OperationalError" in (writer.last_error or "")
    assert await buffer.depth() == 20  # nothing acked while nothing is committed
    await upgrade_head_async(url)  # the database comes back
    await eventually(lambda: writer.records_written == 20)

    await writer.stop(drain_timeout_s=5)
    await running
    assert len(await stored(sessions)) == 20
    assert writer.last_error is None
    await engine.dispose()


async def test_stop_drains_what_is_buffered(sqlite_sessions: Sessions, make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sqlite_sessions, batch_size=10, flush_interval_s=0.5)
    running = asyncio.create_task(writer.run())
    for _ in range(55):
        await buffer.append(make_event())

    await writer.stop(drain_timeout_s=5)

    assert running.done()
    assert len(await stored(sqlite_sessions)) == 55
    assert await buffer.depth() == 0


async def test_stop_gives_up_at_the_timeout_and_keeps_the_events(
    tmp_path: Path, make_event: EventFactory
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'never.db'}")  # never migrated
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(engine), flush_interval_s=0.01, backoff_base_s=0.01)
    running = asyncio.create_task(writer.run())
    await buffer.append(make_event())

    started = time.monotonic()
    await writer.stop(drain_timeout_s=0.3)

    assert time.monotonic() - started < 2
    await asyncio.wait({running}, timeout=2)
    assert running.done()
    assert await buffer.depth() == 1
    await engine.dispose()


def test_record_row_has_utc_time_and_exact_numbers(make_event: EventFactory) -> None:
    row = record_row(make_event(created_at=1_767_225_600.25, latency_ms=0.1 + 0.2, ttft_ms=None))
    assert row["created_at"] == datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    assert row["latency_ms"] == Decimal("0.300")
    assert row["ttft_ms"] is None
    assert row["usage_source"] == "upstream"
    assert set(row) == {column.name for column in UsageRecord.__table__.columns}


def test_record_row_keeps_the_wait_in_the_queue_to_the_microsecond(make_event: EventFactory) -> None:
    assert record_row(make_event(queue_ms=12.3456789))["queue_ms"] == Decimal("12.346")
    assert record_row(make_event(queue_ms=0.0))["queue_ms"] == Decimal("0.000")
    assert record_row(make_event())["queue_ms"] is None


async def test_an_event_buffered_before_the_queue_wait_was_kept_is_written_without_one(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    # as the Redis buffer holds an event (its JSON), written by a process that had no queue_ms yet
    document = msgspec.to_builtins(make_event(queue_ms=5.0))
    del document["queue_ms"]
    old = msgspec.json.Decoder(UsageEvent).decode(msgspec.json.encode(document))
    buffer = MemoryBuffer()
    await buffer.append(old)
    await buffer.append(make_event(queue_ms=250.5))

    await UsageWriter(buffer, sqlite_sessions).flush()

    assert [record.queue_ms for record in await stored(sqlite_sessions)] == [None, Decimal("250.500")]


def test_errors_are_described_without_their_text() -> None:
    assert describe_error(ValueError("team_a secret prompt")) == "ValueError"


async def dead_letters(sessions: Sessions) -> list[UsageDeadLetter]:
    async with sessions() as session:
        return list((await session.scalars(select(UsageDeadLetter))).all())


async def test_an_unencodable_record_is_dead_lettered_and_the_rest_written(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sqlite_sessions, batch_size=10)
    events = [make_event(prompt_tokens=2**63 if n == 3 else 100) for n in range(10)]  # past SQLite's int
    for event in events:
        await buffer.append(event)

    async with asyncio.timeout(10):  # a writer taking the record for an outage would retry forever
        await writer.flush()

    written = {record.request_id for record in await stored(sqlite_sessions)}
    assert written == {e.request_id for n, e in enumerate(events) if n != 3}
    [letter] = await dead_letters(sqlite_sessions)
    assert letter.request_id == events[3].request_id
    assert letter.reason == "OverflowError"
    assert msgspec.json.decode(letter.event, type=UsageEvent) == events[3]
    assert (writer.records_written, writer.records_rejected) == (9, 1)
    assert await buffer.depth() == 0
    assert await dead_letter_count(sqlite_sessions) == 1

    await buffer.append(make_event())  # and the writer goes on
    await writer.flush()
    assert len(await stored(sqlite_sessions)) == 10


async def test_a_record_dead_lettered_twice_is_one_letter(
    sqlite_sessions: Sessions, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, sqlite_sessions)
    poisoned = make_event(completion_tokens=-(2**70))
    for _ in range(2):  # as when two writers both held a reclaimed batch
        await buffer.append(poisoned)
        async with asyncio.timeout(10):
            await writer.flush()

    assert len(await dead_letters(sqlite_sessions)) == 1
    assert await buffer.depth() == 0


def test_refused_and_unencodable_rows_are_told_from_a_database_that_is_away() -> None:
    assert is_refused_record(OverflowError("value out of int32 range"))
    assert is_refused_record(ValueError("invalid input"))
    assert not is_refused_record(ConnectionRefusedError())
    assert not is_refused_record(TimeoutError())
    assert not is_refused_record(OperationalError("INSERT", {}, ConnectionRefusedError()))
