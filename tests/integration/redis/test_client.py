"""The gateway's Redis client on the machine's Redis: what the URL says is what the connections
do, and connections that died under it cost no command."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError

from gateway.redis.client import redis_client
from gateway.redis.group_commit import PipelineBatcher
from tests.integration.redis.conftest import URL, kill_connections_named

pytestmark = pytest.mark.integration
NAME = "gateway-test-stale"


def url_as(user: str, password: str, query: str = "") -> str:
    """The area's db on the test Redis, as `user`."""
    where = urlsplit(URL)
    netloc = f"{user}:{password}@{where.hostname}:{where.port or 6379}"
    return urlunsplit((where.scheme, netloc, where.path, query, ""))


async def test_a_url_with_credentials_a_db_and_a_client_name_is_served_as_it_says(
    admin: Redis, acl_user: tuple[str, str]
) -> None:
    user, password = acl_user
    client = redis_client(url_as(user, password, "client_name=gateway-url-test"))
    batcher = PipelineBatcher(client)
    try:
        replies = await asyncio.gather(
            batcher.submit("INCR", "n"), batcher.submit("CLIENT", "GETNAME"), batcher.submit("ACL", "WHOAMI")
        )
        assert replies == [1, b"gateway-url-test", user.encode()]
        assert await client.incr("n") == 2  # the pool's other connections alike
        assert await admin.get("n") == b"2"  # in the URL's db
    finally:
        await client.aclose()


async def test_a_wrong_password_fails_every_caller(acl_user: tuple[str, str]) -> None:
    user, _ = acl_user
    client = redis_client(url_as(user, "wrong"))
    batcher = PipelineBatcher(client)
    try:
        results = await asyncio.gather(*(batcher.submit("PING") for _ in range(3)), return_exceptions=True)
        assert all(isinstance(result, AuthenticationError) for result in results), results
    finally:
        await client.aclose()


async def test_commands_after_the_server_closed_every_pooled_connection_go_through(admin: Redis) -> None:
    client = redis_client(URL)
    try:
        # Open several pooled connections at once, as concurrent requests do.
        await asyncio.gather(*(client.execute_command("CLIENT", "SETNAME", NAME) for _ in range(8)))
        assert await kill_connections_named(admin, NAME) >= 1
        await asyncio.sleep(0.05)

        replies = await asyncio.gather(*(client.incr("n") for _ in range(8)))

        assert sorted(replies) == list(range(1, 9))  # every command ran once
        script = client.register_script("return redis.call('GET', KEYS[1])")
        await asyncio.gather(*(client.execute_command("CLIENT", "SETNAME", NAME) for _ in range(8)))
        assert await kill_connections_named(admin, NAME) >= 1
        assert await script(keys=["n"]) == b"8"  # scripts (pins, admission) as well
    finally:
        await client.aclose()
