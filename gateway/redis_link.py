"""The connection the group commit (`gateway.redis_batching`) writes its round trips to.

A round trip is one buffer of packed commands out and their replies back, in order. `RespLink` does
it on a socket of its own: an asyncio protocol that feeds what arrives to hiredis (the C parser
redis-py itself uses) and hands the replies over when the last one is in. redis-py's connection
writes through an asyncio stream and reads each reply through three layers of calls and the
stream: per request that was about a tenth of the worker's instructions (docs/performance.md).
`RespLink` serves the connections redis-py would open for a `redis://` or `unix://` URL: it reads
the same settings from the client's pool (host, port or path, db, username, password, client name,
connect timeout, keepalive) and does the same handshake (AUTH, CLIENT SETNAME, SELECT). Anything else (TLS,
a credential provider, fakeredis's in-process connections) goes through `RedisPyLink`, which drives
one redis-py connection of the pool.

Both give each reply or the error Redis answered for that command (the exception redis-py would
raise for it, for the batcher to hand to that command's callers), and raise redis-py's `ConnectionError` when the
connection fails and `TimeoutError` when a round trip takes longer than its timeout.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any, Final, Protocol

import hiredis
from redis._parsers import BaseParser
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, InvalidResponse, ResponseError
from redis.typing import EncodableT

# Pool settings that RespLink does not apply; a pool with any of them gets RedisPyLink (as does
# one whose connections are not plain TCP or Unix sockets: TLS, fakeredis).
_NOT_APPLIED = ("credential_provider", "decode_responses")


Command = tuple[EncodableT, ...]


class Link(Protocol):
    async def round_trip(self, packed: bytes, count: int) -> list[Any]:
        """Write `packed` (`count` commands) and return their `count` replies, an error reply in
        its place as the exception redis-py would raise for it (`ResponseError`, `NoScriptError`,
        `BusyLoadingError`, ...)."""
        ...


def link_for(pool: ConnectionPool, round_trip_timeout_s: float, idle_reconnect_s: float) -> Link:
    kwargs = pool.connection_kwargs
    plain = pool.connection_class in (Connection, UnixDomainSocketConnection)
    resp2 = kwargs.get("protocol") in (None, 2, "2")
    if plain and resp2 and not any(kwargs.get(name) for name in _NOT_APPLIED):
        return RespLink(kwargs, round_trip_timeout_s)
    return RedisPyLink(pool, round_trip_timeout_s, idle_reconnect_s)


def _parse_error(message: str) -> Exception:
    """An error reply as redis-py raises it (NOSCRIPT -> NoScriptError, ...)."""
    error: Exception = BaseParser.parse_error(message)  # type: ignore[no-untyped-call]
    return error


class RespConnection(asyncio.Protocol):
    """One socket to Redis: packed commands out, replies parsed by hiredis as they arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=_parse_error)
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[list[Any]] | None = None
        self._replies: list[Any] = []
        self._expected = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def round_trip(self, packed: bytes, count: int) -> asyncio.Future[list[Any]]:
        """The future of the replies to `packed`; one round trip at a time."""
        assert self.transport is not None and (self._waiter is None or self._waiter.done())
        waiter: asyncio.Future[list[Any]] = self._loop.create_future()
        if self.closed:
            waiter.set_exception(RedisConnectionError("Connection closed by server."))
            return waiter
        self._waiter, self._replies, self._expected = waiter, [], count
        self.transport.write(packed)
        return waiter

    def data_received(self, data: bytes) -> None:
        reader, replies = self._reader, self._replies
        reader.feed(data)
        try:
            reply = reader.gets()
            while reply is not False:
                replies.append(reply)
                reply = reader.gets()
        except InvalidResponse as exc:
            self.abort(RedisConnectionError(f"Protocol error from Redis: {exc}"))
            return
        waiter = self._waiter
        if waiter is None or waiter.done() or len(replies) > self._expected:
            if replies:  # nothing asks for these replies: the connection is out of step, give it up
                self.abort(RedisConnectionError("Redis sent a reply nothing asked for"))
        elif len(replies) == self._expected:
            self._waiter = None
            waiter.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(
            RedisConnectionError(
                f"Connection to Redis lost: {exc}" if exc else "Connection closed by server."
            )
        )

    def abort(self, error: Exception) -> None:
        """Close the socket at once and fail the round trip out with `error`."""
        self.closed = True
        self._fail(error)
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class RespLink:
    """Round trips on a `RespConnection`, opened on first use and again after it closed."""

    def __init__(self, settings: dict[str, Any], round_trip_timeout_s: float) -> None:
        self._settings = settings
        self._timeout_s = round_trip_timeout_s
        self._connection: RespConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def round_trip(self, packed: bytes, count: int) -> list[Any]:
        connection = self._connection
        if connection is None or connection.closed:
            connection = self._connection = await self._connect()
        return await self._replies(connection, packed, count)

    async def _replies(self, connection: RespConnection, packed: bytes, count: int) -> list[Any]:
        """One round trip on `connection`, within the timeout."""
        assert self._loop is not None
        replies = connection.round_trip(packed, count)
        timer = self._loop.call_later(self._timeout_s, _time_out, connection, replies)
        try:
            return await replies
        except asyncio.CancelledError:  # the replies still to come would match no command
            connection.abort(RedisConnectionError("Redis round trip cancelled"))
            raise
        finally:
            timer.cancel()

    async def _connect(self) -> RespConnection:
        loop = self._loop = asyncio.get_running_loop()
        settings = self._settings
        path = settings.get("path")
        where = path or f"{settings.get('host', 'localhost')}:{settings.get('port', 6379)}"
        try:
            async with asyncio.timeout(settings.get("socket_connect_timeout") or self._timeout_s):
                if path:
                    _, connection = await loop.create_unix_connection(lambda: RespConnection(loop), path)
                else:
                    _, connection = await loop.create_connection(
                        lambda: RespConnection(loop),
                        settings.get("host", "localhost"),
                        settings.get("port", 6379),
                    )
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(f"Error connecting to {where}: {exc or 'timed out'}") from exc
        assert connection.transport is not None
        sock = connection.transport.get_extra_info("socket")
        if settings.get("socket_keepalive") and sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in (settings.get("socket_keepalive_options") or {}).items():
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
        try:
            await self._handshake(connection)
        except BaseException:
            connection.abort(RedisConnectionError("Redis handshake failed"))
            raise
        return connection

    async def _handshake(self, connection: RespConnection) -> None:
        """AUTH, CLIENT SETNAME and SELECT, as redis-py's connection does on connect."""
        settings, commands = self._settings, []
        if settings.get("password") is not None:
            username = settings.get("username")
            commands.append(
                ("AUTH", username, settings["password"]) if username else ("AUTH", settings["password"])
            )
        if settings.get("client_name"):
            commands.append(("CLIENT", "SETNAME", settings["client_name"]))
        if int(settings.get("db") or 0):
            commands.append(("SELECT", int(settings["db"])))
        if not commands:
            return
        for reply in await self._replies(connection, pack(commands), len(commands)):
            if isinstance(reply, Exception):
                raise reply


def _time_out(connection: RespConnection, replies: asyncio.Future[list[Any]]) -> None:
    if not replies.done():  # the replies can no longer be matched to commands: a new connection
        connection.abort(TimeoutError())


class RedisPyLink:
    """Round trips on one redis-py connection of the pool, for the pools `RespLink` does not serve.

    The connection is not health-checked before every write: one idle for `idle_reconnect_s` is
    replaced instead, so a Redis restarted meanwhile costs no request."""

    def __init__(self, pool: ConnectionPool, round_trip_timeout_s: float, idle_reconnect_s: float) -> None:
        self._pool = pool
        self._timeout_s = round_trip_timeout_s
        self._idle_reconnect_s = idle_reconnect_s
        self._connection: AbstractConnection | None = None
        self._last_round_trip = 0.0

    async def round_trip(self, packed: bytes, count: int) -> list[Any]:
        connection = await self._ready_connection()
        replies: list[Any] = []
        async with asyncio.timeout(self._timeout_s):
            await connection.send_packed_command(packed, check_health=False)
            for _ in range(count):
                try:
                    replies.append(await connection.read_response())
                except ResponseError as exc:  # this command's error; the connection reads on
                    replies.append(exc)
        return replies

    async def _ready_connection(self) -> AbstractConnection:
        now, connection = asyncio.get_running_loop().time(), self._connection
        if connection is None:
            connection = self._connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            connection.socket_timeout = None  # the round trip's timeout covers its writes and reads
            connection.health_check_interval = 0
        elif now - self._last_round_trip > self._idle_reconnect_s:
            await connection.disconnect()  # the next write connects again
        self._last_round_trip = now
        return connection


# RESP length prefixes, formatted once: `b"$%d\r\n" % n` cost ~600 instructions per argument
_ARRAY: Final = [b"*%d\r\n" % n for n in range(64)]  # Final: a static in the compiled build,
_BULK: Final = [b"$%d\r\n" % n for n in range(1024)]  # not a module-dict lookup per use


def pack(commands: Sequence[Command]) -> bytes:
    """The commands in the Redis protocol (RESP), in one buffer: what redis-py's `pack_commands`
    writes, without its encoder call and type checks for every argument."""
    parts: list[bytes] = []
    for command in commands:
        count = len(command)
        parts.append(_ARRAY[count] if count < 64 else b"*%d\r\n" % count)
        for arg in command:
            kind = type(arg)
            if kind is bytes:
                data: bytes = arg  # type: ignore[assignment]
            elif kind is str:
                text: str = arg  # type: ignore[assignment]  # typed: str.encode compiles to a C call
                data = text.encode()
            elif kind is int or kind is float:
                data = repr(arg).encode()
            elif isinstance(arg, bytearray | memoryview):
                data = bytes(arg)
            else:  # bool (an int to Python, not to Redis) and anything else: redis-py refuses them too
                raise DataError(f"Invalid input of type: {kind.__name__!r}")
            size = len(data)
            parts.append(_BULK[size] if size < 1024 else b"$%d\r\n" % size)
            parts.append(data)
            parts.append(b"\r\n")
    return b"".join(parts)
