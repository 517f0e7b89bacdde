"""UsageWriter on real PostgreSQL and Redis: idempotency, outages, refused rows and their dead
letters, dead writers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from decimal import Decimal

import msgspec
import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageDeadLetter, UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.metering.storage.writer import UsageWriter, dead_letter_count
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.unit.metering.conftest import EventFactory

pytestmark = pytest.mark.integration


async def record_count(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return int(await session.scalar(select(func.count()).select_from(UsageRecord)) or 0)


async def eventually(condition: Callable[[], object], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_retried_event_is_one_record(pg_engine: AsyncEngine, make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    event = make_event()
    for _ in range(3):
        await buffer.append(event)
        await buffer.append(make_event())
        await writer.flush()

    assert await record_count(pg_engine) == 4


async def test_records_survive_the_database_going_away(make_event: EventFactory) -> None:
    database = "gateway_test_metering_outage"
    await drop_database(database)  # not there yet: the writer starts against nothing
    engine = create_engine(pg_url(database))
    buffer = MemoryBuffer()
    writer = UsageWriter(
        buffer, session_factory(engine), flush_interval_s=0.02, backoff_base_s=0.02, backoff_max_s=0.2
    )
    running = asyncio.create_task(writer.run())
    for _ in range(30):
        await buffer.append(make_event())

    await eventually(lambda: writer.last_error is not None)
    assert await buffer.depth() == 30
    await create_database(database)
    await upgrade_head_async(pg_url(database))
    await eventually(lambda: writer.records_written == 30)

    await drop_database(database)  # and once more, mid-run
    for _ in range(20):
        await buffer.append(make_event())
    await eventually(lambda: writer.last_error is not None)
    await create_database(database)
    await upgrade_head_async(pg_url(database))
    await eventually(lambda: writer.records_written == 50)

    await writer.stop(drain_timeout_s=5)
    await running
    assert await record_count(engine) == 20  # the recreated database holds the second wave
    assert await buffer.depth() == 0
    await engine.dispose()
    await drop_database(database)


async def test_a_record_the_database_refuses_does_not_block_the_rest(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    for n in range(9):
        await buffer.append(make_event(batch_id="x" * 200 if n == 4 else "ok"))  # batch_id is VARCHAR(128)

    await writer.flush()

    assert await record_count(pg_engine) == 8
    assert (writer.records_written, writer.records_rejected) == (8, 1)
    assert await buffer.depth() == 0


async def test_a_live_writer_takes_over_what_a_dead_one_left(
    pg_engine: AsyncEngine, redis: Redis, stream: str, make_event: EventFactory
) -> None:
    dead = RedisStreamBuffer(redis, stream=stream, consumer="dead-writer")
    for _ in range(25):
        await dead.append(make_event())
    assert len(await dead.read(10, block_ms=0)) == 10  # read, then the process died before acking

    alive = RedisStreamBuffer(redis, stream=stream, consumer="live-writer")
    # Idle for a second before they are taken over: the first flush comes well within that, even on
    # a machine busy with other work (at 100 ms, a slow moment between the read and the flush had
    # the first flush take them over already).
    writer = UsageWriter(
        alive, session_factory(pg_engine), batch_size=100, reclaim_idle_ms=1_000, reclaim_interval_s=0
    )
    await writer.flush()
    assert await record_count(pg_engine) == 15  # the dead writer's 10 are not idle long enough yet
    await asyncio.sleep(1.05)
    await writer.flush()

    assert await record_count(pg_engine) == 25
    assert await alive.depth() == 0


async def test_a_batch_with_records_already_stored_is_written_once(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    """Batches go by binary COPY; a duplicate among them sends the batch the idempotent way."""
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    events = [make_event() for _ in range(100)]
    for event in events[::2]:
        await buffer.append(event)
    await writer.flush()
    assert await record_count(pg_engine) == 50

    for event in events:  # half of them again, among new ones
        await buffer.append(event)
    await writer.flush()

    assert await record_count(pg_engine) == 100
    assert await buffer.depth() == 0


async def test_a_refused_record_in_a_large_batch_does_not_block_the_rest(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    for n in range(100):
        await buffer.append(make_event(batch_id="x" * 200 if n == 7 else "ok"))

    await writer.flush()

    assert await record_count(pg_engine) == 100 - 1
    assert writer.records_rejected == 1


async def dead_letters(engine: AsyncEngine) -> list[UsageDeadLetter]:
    async with session_factory(engine)() as session:
        return list((await session.scalars(select(UsageDeadLetter))).all())


async def test_an_unencodable_record_is_dead_lettered_and_every_other_written(
    pg_engine: AsyncEngine, redis: Redis, stream: str, make_event: EventFactory
) -> None:
    """A count past BIGINT makes asyncpg raise OverflowError while it builds the COPY: that record
    alone is set aside; the database is not taken for down."""
    buffer = RedisStreamBuffer(redis, stream=stream, consumer="writer-1")
    events = [make_event(prompt_tokens=2**63 if n == 17 else 3_000_000_000) for n in range(40)]
    for event in events:
        await buffer.append(event)
    writer = UsageWriter(buffer, session_factory(pg_engine), batch_size=40, backoff_max_s=0.05)

    async with asyncio.timeout(20):  # a writer taking the record for an outage would retry forever
        await writer.flush()

    assert await record_count(pg_engine) == 39
    [letter] = await dead_letters(pg_engine)
    assert (letter.request_id, letter.reason) == (events[17].request_id, "OverflowError")
    assert msgspec.json.decode(letter.event, type=UsageEvent) == events[17]
    assert await dead_letter_count(session_factory(pg_engine)) == 1
    assert (writer.records_written, writer.records_rejected) == (39, 1)
    assert writer.last_error is None
    assert await redis.xlen(stream) == 0  # acked and deleted: no writer will stick on it again
    pending = await redis.xpending(stream, "writers")
    assert pending["pending"] == 0

    later = make_event()
    await buffer.append(later)
    async with asyncio.timeout(20):
        await writer.flush()
    assert await record_count(pg_engine) == 40


async def test_counts_past_int4_are_written_by_copy_and_by_the_idempotent_path(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    big = {"prompt_tokens": 3_000_000_000, "completion_tokens": 2**40}
    big |= {"cached_tokens": 2**31, "cache_write_tokens": 2**32}
    first = make_event(**big)
    await buffer.append(first)
    await writer.flush()  # COPY straight into usage_records
    await buffer.append(first)
    await buffer.append(make_event(**big))
    await writer.flush()  # a duplicate among them: COPY into the staging table, INSERT ... SELECT

    async with session_factory(pg_engine)() as session:
        rows = (await session.scalars(select(UsageRecord))).all()
    assert len(rows) == 2
    assert {(r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.cache_write_tokens) for r in rows} == {
        (3_000_000_000, 2**40, 2**31, 2**32)
    }
    assert writer.records_rejected == 0


async def test_the_wait_in_the_queue_is_written_by_copy_and_by_the_idempotent_path(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    first = make_event(queue_ms=1.2346)
    await buffer.append(first)
    await writer.flush()  # COPY straight into usage_records
    await buffer.append(first)
    await buffer.append(make_event(queue_ms=None))
    await writer.flush()  # a duplicate among them: COPY into the staging table, INSERT ... SELECT

    async with session_factory(pg_engine)() as session:
        waits = (await session.scalars(select(UsageRecord.queue_ms))).all()
    assert sorted(waits, key=lambda wait: wait is None) == [Decimal("1.235"), None]


async def test_a_record_the_database_refuses_is_dead_lettered_with_its_reason(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    buffer = MemoryBuffer()
    writer = UsageWriter(buffer, session_factory(pg_engine))
    refused = make_event(request_id="r" * 80)  # request_id is VARCHAR(64)
    await buffer.append(refused)
    await buffer.append(make_event())

    await writer.flush()

    [letter] = await dead_letters(pg_engine)
    assert letter.request_id == refused.request_id
    assert letter.reason == "StringDataRightTruncationError (SQLSTATE 22001)"  # the kind, not the value
    assert await record_count(pg_engine) == 1
