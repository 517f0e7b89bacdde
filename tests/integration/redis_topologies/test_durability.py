"""WAIT after the writes a failover must keep: a usage event, a pin placed, moved or confirmed.

Through a Sentinel set whose master has one replica: when the write returns, the replica holds it
(WAIT was sent on the write's own connection); when more replicas are asked for than exist, the
usage event is not taken as stored and goes to the spool, from which its process writes it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.redis.client import redis_client
from gateway.redis.group_commit import PipelineBatcher, ReplicasBehind
from gateway.redis.urls import Durability
from gateway.routing.batch_pin import new_pin
from gateway.routing.pins import RedisPinStore
from tests.integration.redis_topologies.servers import LocalSentinelSet
from tests.integration.redis_topologies.test_redis_users import usage_event
from tests.unit.routing.catalog import CHAT


@pytest.fixture
async def sentinel_master(sentinel_set: LocalSentinelSet) -> AsyncIterator[Redis]:
    sentinel_set.master().client().flushall()
    client = redis_client(sentinel_set.url())
    assert isinstance(client, Redis)
    try:
        yield client
    finally:
        await client.aclose()


def replica_of(sentinel_set: LocalSentinelSet) -> Redis:
    master = sentinel_set.master()
    replica = next(server for server in sentinel_set.servers if server is not master)
    return Redis(port=replica.port)


async def test_a_usage_event_is_on_the_replica_when_its_append_returns(
    sentinel_set: LocalSentinelSet, sentinel_master: Redis
) -> None:
    batcher = PipelineBatcher(sentinel_master, durability=Durability(min_replicas=1, replica_timeout_ms=2000))
    buffer = RedisStreamBuffer(sentinel_master, batcher=batcher)
    replica = replica_of(sentinel_set)
    try:
        for i in range(20):
            await buffer.append(usage_event(f"req-{i}"))
            assert await replica.xlen(buffer.stream) == i + 1
    finally:
        await replica.aclose()
    assert not buffer.spooling


async def test_an_event_too_few_replicas_acknowledged_goes_to_the_spool(sentinel_master: Redis) -> None:
    batcher = PipelineBatcher(sentinel_master, durability=Durability(min_replicas=2, replica_timeout_ms=100))
    buffer = RedisStreamBuffer(sentinel_master, batcher=batcher)
    reply = batcher.submit("SET", "gw:test:not-durable", "1")  # shares the round trip, needs no WAIT

    await buffer.append(usage_event("req-unacknowledged"))

    assert await reply == b"OK"
    assert buffer.spooling and await buffer.spool.depth() == 1
    # The entry may well be in the stream too: the writer keeps one record per request id.
    assert await sentinel_master.xlen(buffer.stream) == 1
    with pytest.raises(ReplicasBehind):
        await batcher.merge("durable", None, lambda _: ("SET", "gw:test:durable", "1"), durable=True)


async def test_a_pin_placed_moved_and_confirmed_is_on_the_replica(
    sentinel_set: LocalSentinelSet, sentinel_master: Redis
) -> None:
    store = RedisPinStore(sentinel_master, 60, durability=Durability(min_replicas=1, replica_timeout_ms=2000))
    replica = replica_of(sentinel_set)
    us, eu = CHAT["openai-us"], CHAT["vllm-eu"]
    try:
        pin = await store.place(new_pin("team_a", "batch-1", us, time.time()))
        assert await replica.hget("gw:pin:{team_a:batch-1}", "confirmed") == b"0"
        moved = await store.move(pin, eu)
        assert b'"vllm-eu' in (await replica.hget("gw:pin:{team_a:batch-1}", "pin") or b"")
        await store.confirm("team_a", "batch-1", moved.deployment)
        assert await replica.hget("gw:pin:{team_a:batch-1}", "confirmed") == b"1"
    finally:
        await replica.aclose()


async def test_a_pin_too_few_replicas_acknowledged_is_kept(sentinel_master: Redis) -> None:
    store = RedisPinStore(sentinel_master, 60, durability=Durability(min_replicas=2, replica_timeout_ms=50))

    placed = await asyncio.wait_for(store.place(new_pin("team_a", "b", CHAT["openai-us"], time.time())), 5)

    assert placed.deployment == CHAT["openai-us"].id  # the rendezvous choice would place it there again
