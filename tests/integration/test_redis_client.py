"""The gateway's Redis client on a real Redis: connections that died under it cost no command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.redis_batching import PipelineBatcher
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


async def test_the_group_commit_reconnects_after_its_connection_was_closed(
    group_commit: tuple[PipelineBatcher, Redis],
) -> None:
    batcher, admin = group_commit
    await batcher.submit("CLIENT", "SETNAME", NAME)
    assert await batcher.submit("INCR", f"{NAME}:g") == 1
    assert await _kill_our_connections(admin) == 1
    await asyncio.sleep(0.05)
    # The round trip on the dead connection fails (its usage events go to the spool) ...
    with pytest.raises(RedisConnectionError):
        await batcher.submit("INCR", f"{NAME}:g")
    # ... and the next one is on a new connection.
    assert await batcher.submit("INCR", f"{NAME}:g") == 2


@pytest.mark.parametrize("group_commit", [{"idle_reconnect_s": 0.05}], indirect=True)
async def test_a_group_commit_idle_long_enough_reconnects_before_it_writes(
    group_commit: tuple[PipelineBatcher, Redis],
) -> None:
    """A Redis restarted while the gateway was idle: the first request after it does not fail."""
    batcher, admin = group_commit
    await batcher.submit("CLIENT", "SETNAME", NAME)
    assert await _kill_our_connections(admin) == 1
    await asyncio.sleep(0.1)

    assert await batcher.submit("INCR", f"{NAME}:g") == 1


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
