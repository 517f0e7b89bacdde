"""`RespLink`, the group commit's own Redis connection, on the machine's Redis: the handshake
redis-py would do, replies larger than a read, and failures as redis-py reports them."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis_batching import PipelineBatcher
from gateway.redis_link import RespLink, pack
from gateway.services import redis_client

REDIS = "redis://127.0.0.1:6379"
DB = 15  # tests/unit/test_redis_batching.py's db: flushed before and after each test


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client = Redis.from_url(f"{REDIS}/{DB}")
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture
async def acl_user(admin: Redis) -> AsyncIterator[tuple[str, str]]:
    user, password = f"gateway-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    yield user, password
    await admin.execute_command("ACL", "DELUSER", user)


def link_of(url: str) -> RespLink:
    link = PipelineBatcher(redis_client(url))._link
    assert isinstance(link, RespLink)
    return link


async def test_the_handshake_selects_the_db_names_the_client_and_authenticates(
    admin: Redis, acl_user: tuple[str, str]
) -> None:
    user, password = acl_user
    link = link_of(f"redis://{user}:{password}@127.0.0.1:6379/{DB}?client_name=gateway-link-test")

    replies = await link.round_trip(pack([("INCR", "n"), ("CLIENT", "GETNAME"), ("ACL", "WHOAMI")]), 3)

    assert replies == [1, b"gateway-link-test", user.encode()]
    assert await admin.get("n") == b"1"  # in db 15, not db 0


async def test_a_wrong_password_fails_every_caller_as_redis_py_would(acl_user: tuple[str, str]) -> None:
    user, _ = acl_user
    batcher = PipelineBatcher(redis_client(f"redis://{user}:wrong@127.0.0.1:6379/{DB}"))
    results = await asyncio.gather(*(batcher.submit("PING") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(result, AuthenticationError) for result in results), results


async def test_replies_larger_than_a_read_and_thousands_in_one_round_trip(admin: Redis) -> None:
    link = link_of(f"{REDIS}/{DB}")
    big = bytes(range(256)) * 8192  # 2 MiB, every byte value: many reads of the socket
    replies = await link.round_trip(pack([("SET", "big", big), ("GET", "big"), ("STRLEN", "big")]), 3)
    assert replies == [b"OK", big, len(big)]  # the replies as Redis sent them
    commands = [("INCR", "count") for _ in range(5000)]
    replies = await link.round_trip(pack([*commands, ("LPUSH", "count", "x"), ("GET", "count")]), 5002)
    assert replies[:5000] == list(range(1, 5001))  # in order
    assert isinstance(replies[5000], ResponseError)  # WRONGTYPE, in its place; the rest read on
    assert replies[5001] == b"5000"


async def test_an_unreachable_redis_is_a_connection_error_and_a_recovered_one_serves() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    batcher = PipelineBatcher(redis_client(f"redis://127.0.0.1:{port}"))  # db 0: no handshake
    results = await asyncio.gather(*(batcher.submit("PING") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(result, RedisConnectionError) for result in results), results
    assert "Error connecting to 127.0.0.1" in str(results[0])

    with socket.socket() as listener:  # "Redis" is back on that port: a listener answering PING
        listener.bind(("127.0.0.1", port))
        listener.listen()
        listener.setblocking(False)

        async def serve_one() -> None:
            loop = asyncio.get_running_loop()
            conn, _ = await loop.sock_accept(listener)
            with conn:
                await loop.sock_recv(conn, 1024)
                await loop.sock_sendall(conn, b"+PONG\r\n")
                await asyncio.sleep(0.05)

        server = asyncio.create_task(serve_one())
        assert await batcher.submit("PING") == b"PONG"
        await server
