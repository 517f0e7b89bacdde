"""Group commit for Redis: commands issued while a round trip is out share the next one.

Each caller still awaits its own command's reply, so nothing is acknowledged before Redis has it;
under load one round trip (one socket write, one read) carries many commands instead of one each.

The batcher keeps one connection of its own and writes packed commands to it directly: redis-py's
`Pipeline` (a pool checkout, a command stack, response callbacks, a retry wrapper per flush) costs
several times the commands it carries, and these are on the path of every proxied request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError, ResponseError
from redis.typing import EncodableT

Command = tuple[EncodableT, ...]


class PipelineBatcher:
    def __init__(self, redis: Redis) -> None:
        self._pool = redis.connection_pool
        self._connection: AbstractConnection | None = None
        self._pending: list[tuple[Command, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, *command: EncodableT) -> asyncio.Future[Any]:
        """Queue one command (`"XADD", stream, "*", field, value`); the future is its reply.

        Commands queued in the same loop iteration go out together on the next one; while a round
        trip is out, new commands wait for it and then share the following one."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._drain())
        return future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._flush(batch)
        finally:
            self._flusher = None

    async def _flush(self, batch: list[tuple[Command, asyncio.Future[Any]]]) -> None:
        try:
            connection = self._connection or await self._connect()
            await connection.send_packed_command(connection.pack_commands([c for c, _ in batch]))
            for _, future in batch:
                try:
                    reply = await connection.read_response()
                except ResponseError as exc:  # this command's error; the connection reads on
                    if not future.done():
                        future.set_exception(exc)
                    continue
                if not future.done():
                    future.set_result(reply)
        except BaseException as exc:  # every waiter left learns of the failure and handles it itself
            # redis-py has closed the connection on a failed write or read: the next flush reconnects.
            failure = exc if isinstance(exc, Exception) else RedisError("Redis round trip cancelled")
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise

    async def _connect(self) -> AbstractConnection:
        self._connection = await self._pool.get_connection()
        return self._connection
