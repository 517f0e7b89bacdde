"""The machine's Redis for the Redis client and group commit tests: the redis area's db, flushed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from tests.support.stores import redis_url

URL = redis_url("redis")


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    """A plain client on the area's db, flushed before and after the test."""
    client = Redis.from_url(URL)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture
async def acl_user(admin: Redis) -> AsyncIterator[tuple[str, str]]:
    """A Redis user of this test's own, with its password."""
    user, password = f"gateway-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    yield user, password
    await admin.execute_command("ACL", "DELUSER", user)


async def kill_connections_named(admin: Redis, name: str) -> int:
    """What a Redis restart does to a client's connections: the server closes them. Only those
    named `name`, so that nothing else using this Redis is disturbed."""
    ours = [c["id"] for c in await admin.client_list() if c.get("name") == name]
    for client_id in ours:
        await admin.execute_command("CLIENT", "KILL", "ID", client_id)
    return len(ours)
