"""Fixtures for shared capacity permits: the scheduling area's Redis db (flushed), and banks standing
for gateway processes, each with a client of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from redis.asyncio import BlockingConnectionPool, Redis

from gateway.redis.group_commit import PipelineBatcher
from gateway.scheduling.redis.permits import RedisPermits
from tests.support.stores import REDIS_DBS, REDIS_SERVER, redis_url

REDIS_URL = redis_url("scheduling")

Processes = Callable[..., RedisPermits]


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    """A plain client on the area's db, flushed before and after the test."""
    client = Redis.from_url(REDIS_URL)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture
async def process(admin: Redis) -> AsyncIterator[Processes]:
    """`process(name, lease_s=..., poll_s=...)`: a started bank named `name`, on a Redis client of
    its own (as another gateway process would hold). Each is closed after the test, so that none
    keeps writing to the next test's db."""
    banks: list[tuple[RedisPermits, Redis]] = []

    def started(name: str, lease_s: float = 3.0, poll_s: float | None = None) -> RedisPermits:
        client = Redis(connection_pool=BlockingConnectionPool.from_url(REDIS_URL, max_connections=4))
        bank = RedisPermits(client, PipelineBatcher(client), lease_s=lease_s, process=name, poll_s=poll_s)
        bank.start()
        banks.append((bank, client))
        return bank

    yield started
    for bank, client in banks:
        await bank.aclose()
        await client.aclose()


def kill(bank: RedisPermits) -> None:
    """What SIGKILL does to a process's permits: nothing renews them and nothing gives them back."""
    for task in asyncio.all_tasks():
        if task.get_name() == f"permit-leases:{bank.process}":
            task.cancel()


@dataclass
class RedisLink:
    """A TCP relay to the test Redis that can be cut and mended: an outage between one process and
    Redis, while Redis itself (and every other client of it) carries on."""

    port: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{REDIS_DBS['scheduling']}"

    async def mend(self) -> None:
        """Relay again (on the same port once it had one)."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def cut(self) -> None:
        """Close every relayed connection and refuse new ones."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server = urlsplit(REDIS_SERVER)
        redis_reader, redis_writer = await asyncio.open_connection(server.hostname, server.port or 6379)
        self._writers |= {client_writer, redis_writer}
        await asyncio.gather(_pipe(client_reader, redis_writer), _pipe(redis_reader, client_writer))
        self._writers -= {client_writer, redis_writer}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.fixture
async def link() -> AsyncIterator[RedisLink]:
    relay = RedisLink()
    await relay.mend()
    yield relay
    await relay.cut()
