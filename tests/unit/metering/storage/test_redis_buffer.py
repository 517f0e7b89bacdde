"""RedisStreamBuffer against fakeredis and, marked integration, the machine's real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import fakeredis
import msgspec
import pytest
from redis.asyncio import Redis

from gateway.metering.storage.buffer import MeteringBacklogFull
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from tests.support.stores import redis_url
from tests.unit.metering.conftest import EventFactory

REAL_REDIS_URL = redis_url("metering")


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.integration)])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    client: Redis = (
        fakeredis.aioredis.FakeRedis() if request.param == "fakeredis" else Redis.from_url(REAL_REDIS_URL)
    )
    yield client
    await client.aclose()


@pytest.fixture
async def stream(redis: Redis) -> AsyncIterator[str]:
    name = f"gateway_test_metering:usage:{uuid.uuid4().hex}"
    yield name
    await redis.delete(name)


def buffer_on(redis: Redis, stream: str, consumer: str = "writer-1", maxlen: int = 1000) -> RedisStreamBuffer:
    return RedisStreamBuffer(redis, stream=stream, group="writers", consumer=consumer, maxlen=maxlen)


async def test_round_trip_then_ack_deletes(redis: Redis, stream: str, make_event: EventFactory) -> None:
    buffer = buffer_on(redis, stream)
    events = [make_event(batch_id="b1"), make_event(ttft_ms=12.5), make_event()]
    for event in events:
        await buffer.append(event)

    entries = await buffer.read(10, block_ms=0)

    assert [event for _, event in entries] == events
    assert await buffer.depth() == 3
    await buffer.ack([entry_id for entry_id, _ in entries])
    assert await buffer.depth() == 0
    assert await redis.xlen(stream) == 0
    assert await buffer.read(10, block_ms=0) == []


async def test_acks_of_several_batches_and_of_more_ids_than_a_slice_all_land(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = buffer_on(redis, stream, maxlen=10_000)
    await asyncio.gather(*(buffer.append(make_event()) for _ in range(2_345)))
    first = await buffer.read(2_001, block_ms=0)  # the script acks in slices of 1,000 ids
    rest = await buffer.read(1_000, block_ms=0)
    pending_before = (await redis.xpending(stream, "writers"))["pending"]

    # Two acks in the same loop iteration go out merged into one script call.
    await asyncio.gather(buffer.ack([i for i, _ in first]), buffer.ack([i for i, _ in rest[:-1]]))

    assert pending_before == 2_345
    assert (await redis.xpending(stream, "writers"))["pending"] == 1
    assert await redis.xlen(stream) == 1
    remaining = await redis.xrange(stream)
    assert remaining[0][0].decode() == rest[-1][0]


async def test_read_on_an_empty_stream_returns_after_block_ms(redis: Redis, stream: str) -> None:
    entries = await asyncio.wait_for(buffer_on(redis, stream).read(10, block_ms=50), timeout=5)
    assert entries == []


async def test_over_the_bound_append_is_refused_and_taken_back(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = buffer_on(redis, stream, maxlen=2)
    await buffer.append(make_event())
    await buffer.append(make_event())

    with pytest.raises(MeteringBacklogFull):
        await buffer.append(make_event())
    assert await buffer.depth() == 2


async def test_entries_of_a_dead_consumer_are_reclaimed(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    dead, alive = buffer_on(redis, stream, "dead"), buffer_on(redis, stream, "alive")
    events = [make_event() for _ in range(3)]
    for event in events:
        await dead.append(event)
    await dead.read(10, block_ms=0)  # ... and never acks

    assert await alive.read(10, block_ms=0) == []  # handed out already
    assert await alive.reclaim(min_idle_ms=60_000, max_count=10) == []  # not idle long enough
    await asyncio.sleep(0.05)
    reclaimed = await alive.reclaim(min_idle_ms=20, max_count=10)

    assert [event for _, event in reclaimed] == events
    await alive.ack([entry_id for entry_id, _ in reclaimed])
    assert await alive.depth() == 0


async def test_reclaim_takes_at_most_max_count(redis: Redis, stream: str, make_event: EventFactory) -> None:
    dead, alive = buffer_on(redis, stream, "dead"), buffer_on(redis, stream, "alive")
    for _ in range(5):
        await dead.append(make_event())
    await dead.read(10, block_ms=0)

    first = await alive.reclaim(min_idle_ms=0, max_count=2)
    assert len(first) == 2


async def test_an_unreadable_entry_is_dropped_not_jammed(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = buffer_on(redis, stream)
    await redis.xadd(stream, {"event": b"{not json"})
    good = make_event()
    await buffer.append(good)

    entries = await buffer.read(10, block_ms=0)

    assert [event for _, event in entries] == [good]
    assert await buffer.depth() == 1  # the unreadable one is gone, the good one awaits its ack


async def test_a_vanished_stream_gets_its_group_back(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = buffer_on(redis, stream)
    await buffer.read(1, block_ms=0)  # creates the group
    await redis.delete(stream)  # e.g. an operator flushed Redis
    event = make_event()
    await buffer.append(event)
    await redis.delete(stream)
    await buffer.append(event)

    assert [e for _, e in await buffer.read(10, block_ms=0)] == [event]


async def test_the_oldest_unwritten_entry_is_the_streams_first(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = buffer_on(redis, stream)
    assert await buffer.oldest_age_s() is None
    a_minute_ago = int(time.time() * 1000) - 60_000
    await redis.xadd(stream, {"event": msgspec.json.encode(make_event())}, id=f"{a_minute_ago}-0")
    await buffer.append(make_event())

    age = await buffer.oldest_age_s()
    assert age is not None and 59 < age < 65
    entries = await buffer.read(1, block_ms=0)  # read, not written: still the oldest
    assert await buffer.oldest_age_s() == pytest.approx(age, abs=1)
    await buffer.ack([entry_id for entry_id, _ in entries])
    newer = await buffer.oldest_age_s()
    assert newer is not None and newer < 5
    await buffer.ack([entry_id for entry_id, _ in await buffer.read(10, block_ms=0)])
    assert await buffer.oldest_age_s() is None
