"""RedisStreamBuffer while Redis is unreachable: events go to the local spool, then to the database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import UsageRecord
from gateway.metering.storage.buffer import MeteringBacklogFull
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.metering.storage.writer import UsageWriter
from tests.unit.metering.conftest import EventFactory


@pytest.fixture
async def server_and_redis() -> AsyncIterator[tuple[fakeredis.FakeServer, Redis]]:
    server = fakeredis.FakeServer()
    client: Redis = fakeredis.aioredis.FakeRedis(server=server)
    yield server, client
    await client.aclose()


def buffer_on(redis: Redis, spool_maxlen: int = 100, stream_retry_s: float = 0.0) -> RedisStreamBuffer:
    return RedisStreamBuffer(
        redis,
        stream=f"usage:{uuid.uuid4().hex}",
        consumer="writer-1",
        spool_maxlen=spool_maxlen,
        stream_retry_s=stream_retry_s,
    )


async def test_an_append_while_redis_is_down_is_spooled_not_failed(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis)
    await buffer.append(make_event())
    assert await buffer.depth() == 1
    server.connected = False

    event = make_event()
    await buffer.append(event)

    assert buffer.spooling
    assert await buffer.depth() == 2  # one in the stream (last length seen), one spooled
    entries = await buffer.read(10, block_ms=0)  # no Redis needed for spooled events
    assert [e for _, e in entries] == [event]
    await buffer.ack([entry_id for entry_id, _ in entries])
    assert await buffer.spool.depth() == 0


async def test_appends_go_back_to_the_stream_once_redis_answers(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis)
    server.connected = False
    spooled = make_event()
    await buffer.append(spooled)
    server.connected = True

    streamed = make_event()
    await buffer.append(streamed)

    assert not buffer.spooling
    assert await redis.xlen(buffer.stream) == 1
    first = await buffer.read(10, block_ms=0)
    second = await buffer.read(10, block_ms=0)
    assert [e for _, e in first] == [spooled]  # the spool is drained first
    assert [e for _, e in second] == [streamed]
    await buffer.ack([i for i, _ in first + second])
    assert await buffer.depth() == 0


async def test_while_spooling_the_stream_is_retried_only_after_a_pause(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis, stream_retry_s=3600)
    server.connected = False
    await buffer.append(make_event())
    server.connected = True

    await buffer.append(make_event())  # Redis answers again, but the pause is not over

    assert await buffer.spool.depth() == 2
    assert await redis.xlen(buffer.stream) == 0


async def test_a_full_spool_refuses_the_event(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis, spool_maxlen=1)
    server.connected = False
    await buffer.append(make_event())

    with pytest.raises(MeteringBacklogFull):
        await buffer.append(make_event())


async def test_the_writer_persists_spooled_events_while_redis_is_down(
    server_and_redis: tuple[fakeredis.FakeServer, Redis],
    make_event: EventFactory,
    sqlite_sessions: async_sessionmaker[AsyncSession],
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis)
    writer = UsageWriter(buffer, sqlite_sessions)
    server.connected = False
    events = [make_event() for _ in range(3)]
    for event in events:
        await buffer.append(event)

    await writer.stop(drain_timeout_s=5)  # drains the spool; then finds the stream unreachable

    async with sqlite_sessions() as session:
        stored = (await session.scalars(select(UsageRecord.request_id))).all()
    assert sorted(stored) == sorted(e.request_id for e in events)
    assert writer.last_error is not None  # the stream part could not be drained


async def test_concurrent_appends_share_round_trips_and_all_land(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    import asyncio

    _, redis = server_and_redis
    buffer = buffer_on(redis)
    events = [make_event() for _ in range(300)]
    await asyncio.gather(*(buffer.append(e) for e in events))
    assert await redis.xlen(buffer.stream) == 300
    read = await buffer.read(1000, block_ms=0)
    assert sorted(e.request_id for _, e in read) == sorted(e.request_id for e in events)


async def test_a_failed_group_commit_spools_every_event_of_it(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    import asyncio

    server, redis = server_and_redis
    buffer = buffer_on(redis)
    await buffer.append(make_event())  # the first append also checks the stream length
    server.connected = False
    await asyncio.gather(*(buffer.append(make_event()) for _ in range(50)))
    assert await buffer.spool.depth() == 50


async def test_the_oldest_unwritten_age_counts_the_spool_and_outlives_an_outage(
    server_and_redis: tuple[fakeredis.FakeServer, Redis], make_event: EventFactory
) -> None:
    server, redis = server_and_redis
    buffer = buffer_on(redis)
    await buffer.append(make_event())
    streamed = await buffer.oldest_age_s()
    assert streamed is not None
    server.connected = False
    await buffer.append(make_event())  # spooled

    age = await buffer.oldest_age_s()
    assert age is not None and age >= streamed  # the stream's first entry, as last seen
    await buffer.ack([entry_id for entry_id, _ in await buffer.read(10, block_ms=0)])  # the spooled one
    assert await buffer.spool.oldest_age_s() is None
    still = await buffer.oldest_age_s()
    assert still is not None and still >= age
