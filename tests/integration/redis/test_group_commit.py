"""The group commit on the machine's Redis when its connection dies: while idle, or with a round
trip out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis.client import redis_client
from gateway.redis.group_commit import PipelineBatcher
from tests.integration.redis.conftest import URL, kill_connections_named

pytestmark = pytest.mark.integration
NAME = "gateway-test-group-commit"


@pytest.fixture
async def batcher(admin: Redis) -> AsyncIterator[PipelineBatcher]:
    """A group commit on the gateway's Redis client, its connection named NAME."""
    client = redis_client(URL)
    batcher = PipelineBatcher(client)
    assert await batcher.submit("CLIENT", "SETNAME", NAME) == b"OK"
    yield batcher
    await client.aclose()


async def test_a_connection_redis_closed_while_idle_is_replaced_before_the_next_round_trip(
    batcher: PipelineBatcher, admin: Redis
) -> None:
    """A Redis restarted while the gateway was idle: the first request after it does not fail."""
    assert await batcher.submit("INCR", "g") == 1
    assert await kill_connections_named(admin, NAME) == 1
    await asyncio.sleep(0.05)

    assert await batcher.submit("INCR", "g") == 2  # on a new connection
    assert await batcher.submit("CLIENT", "GETNAME") is None  # (a new connection has no name)


async def test_a_connection_lost_during_a_round_trip_fails_its_callers_and_the_next_one_reconnects(
    batcher: PipelineBatcher, admin: Redis
) -> None:
    waiting = [batcher.submit("BLPOP", "never", 0), batcher.submit("INCR", "g")]
    await asyncio.sleep(0.1)  # the round trip is out; Redis holds BLPOP's answer back
    assert await kill_connections_named(admin, NAME) == 1
    # The round trip on the dead connection fails (its usage events go to the spool) ...
    for future in waiting:
        with pytest.raises(RedisConnectionError):
            await future
    # ... and the next one is on a new connection (the INCR behind BLPOP never ran).
    assert await batcher.submit("INCR", "g") == 1
