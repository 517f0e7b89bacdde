"""The gateway's Redis client on a real Redis: connections that died under it cost no command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.redis_batching import PipelineBatcher
from gateway.redis_link import RedisPyLink, pack
from gateway.services import redis_client

REDIS_URL = "redis://127.0.0.1:6379/0"
NAME = "gateway-test-stale"


async def _kill_our_connections(admin: Redis) -> int:
    """What a Redis restart does to every pooled connection: the server closes it. Only the
    connections named NAME, so that nothing else using this Redis is disturbed."""
    ours = [c["id"] for c in await admin.client_list() if c.get("name") == NAME]
    for client_id in ours:
        await admin.execute_command("CLIENT", "KILL", "ID", client_id)
    return len(ours)


async def test_commands_after_the_server_closed_every_pooled_connection_go_through() -> None:
    client, admin = redis_client(REDIS_URL), Redis.from_url(REDIS_URL)
    try:
        # Open several pooled connections at once, as concurrent requests do.
        await asyncio.gather(*(client.execute_command("CLIENT", "SETNAME", NAME) for _ in range(8)))
        assert await _kill_our_connections(admin) >= 1
        await asyncio.sleep(0.05)

        replies = await asyncio.gather(*(client.incr(f"{NAME}:n") for _ in range(8)))

        assert sorted(replies)[-1] - sorted(replies)[0] == 7  # every command ran once
        script = client.register_script("return redis.call('GET', KEYS[1])")
        await asyncio.gather(*(client.execute_command("CLIENT", "SETNAME", NAME) for _ in range(8)))
        assert await _kill_our_connections(admin) >= 1
        assert await script(keys=[f"{NAME}:n"]) is not None  # scripts (pins, admission) as well
    finally:
        await admin.delete(f"{NAME}:n")
        await client.aclose()
        await admin.aclose()


@pytest.fixture
async def group_commit(request: pytest.FixtureRequest) -> AsyncIterator[tuple[PipelineBatcher, Redis]]:
    """A group commit on the gateway's Redis client (with the options of an indirect parameter),
    and an admin client to kill its connection."""
    client, admin = redis_client(REDIS_URL), Redis.from_url(REDIS_URL)
    try:
        yield PipelineBatcher(client, **getattr(request, "param", {})), admin
    finally:
        await admin.delete(f"{NAME}:g")
        await client.aclose()
        await admin.aclose()


async def test_a_connection_redis_closed_while_idle_is_replaced_before_the_next_round_trip(
    group_commit: tuple[PipelineBatcher, Redis],
) -> None:
    """A Redis restarted while the gateway was idle: the first request after it does not fail."""
    batcher, admin = group_commit
    await batcher.submit("CLIENT", "SETNAME", NAME)
    assert await batcher.submit("INCR", f"{NAME}:g") == 1
    assert await _kill_our_connections(admin) == 1
    await asyncio.sleep(0.05)

    assert await batcher.submit("INCR", f"{NAME}:g") == 2  # on a new connection
    assert await batcher.submit("CLIENT", "GETNAME") is None  # (a new connection has no name)


async def test_a_connection_lost_during_a_round_trip_fails_its_callers_and_the_next_one_reconnects(
    group_commit: tuple[PipelineBatcher, Redis],
) -> None:
    batcher, admin = group_commit
    await batcher.submit("CLIENT", "SETNAME", NAME)
    waiting = [batcher.submit("BLPOP", f"{NAME}:never", 0), batcher.submit("INCR", f"{NAME}:g")]
    await asyncio.sleep(0.1)  # the round trip is out; Redis holds BLPOP's answer back
    assert await _kill_our_connections(admin) == 1
    # The round trip on the dead connection fails (its usage events go to the spool) ...
    for future in waiting:
        with pytest.raises(RedisConnectionError):
            await future
    # ... and the next one is on a new connection (the INCR behind BLPOP never ran).
    assert await batcher.submit("INCR", f"{NAME}:g") == 1


async def test_the_redis_py_link_replaces_a_connection_idle_long_enough_before_it_writes() -> None:
    """`RedisPyLink` (TLS and other pools) cannot see a close while idle: it reconnects after
    `idle_reconnect_s` instead."""
    client, admin = redis_client(REDIS_URL), Redis.from_url(REDIS_URL)
    link = RedisPyLink(client.connection_pool, round_trip_timeout_s=1.0, idle_reconnect_s=0.05)
    try:
        assert await link.round_trip(pack([("CLIENT", "SETNAME", NAME)]), 1) == [b"OK"]
        assert await _kill_our_connections(admin) == 1
        await asyncio.sleep(0.1)

        assert await link.round_trip(pack([("INCR", f"{NAME}:p"), ("INCR", f"{NAME}:p")]), 2) == [1, 2]
    finally:
        await admin.delete(f"{NAME}:p")
        await client.aclose()
        await admin.aclose()


async def test_a_round_trip_without_an_answer_fails_in_time_and_the_next_one_goes_through() -> None:
    client = redis_client(REDIS_URL)
    batcher = PipelineBatcher(client, round_trip_timeout_s=0.2)
    try:
        with pytest.raises(RedisError, match="in time"):
            await batcher.submit("BLPOP", f"{NAME}:never", 0)  # Redis holds the answer back
        assert await batcher.submit("INCR", f"{NAME}:t") == 1
    finally:
        await client.delete(f"{NAME}:t")
        await client.aclose()
