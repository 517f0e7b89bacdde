"""UsageWriter on real PostgreSQL and Redis: idempotency, outages, refused rows, dead writers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.metering.buffer import MemoryBuffer
from gateway.metering.redis_buffer import RedisStreamBuffer
from gateway.metering.writer import UsageWriter
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
