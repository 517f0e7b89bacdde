"""Usage appends on a real Redis: many requests' events in one script call, each its own entry."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from tests.unit.metering.conftest import EventFactory


async def test_concurrent_appends_are_one_entry_each_and_read_back_whole(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = RedisStreamBuffer(redis, stream=stream, group="g")
    events = [make_event() for _ in range(500)]

    await asyncio.gather(*(buffer.append(e) for e in events))

    assert await redis.xlen(stream) == 500
    read = await buffer.read(1000, block_ms=0)
    assert sorted(e.request_id for _, e in read) == sorted(e.request_id for e in events)
    assert {e.request_id: e for _, e in read} == {e.request_id: e for e in events}
    assert len({entry_id for entry_id, _ in read}) == 500
    assert not buffer.spooling


async def test_appends_still_land_after_redis_forgets_its_scripts(
    redis: Redis, stream: str, make_event: EventFactory
) -> None:
    buffer = RedisStreamBuffer(redis, stream=stream, group="g")
    await buffer.append(make_event())
    await redis.script_flush()  # what a Redis restart does to the script cache

    await asyncio.gather(*(buffer.append(make_event()) for _ in range(20)))

    assert await redis.xlen(stream) == 21
    assert not buffer.spooling  # NOSCRIPT was answered by loading the script, not by spooling
