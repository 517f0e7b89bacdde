"""Group commit for Redis: commands issued while a round trip is out share the next one.

Each caller still awaits its own command's reply, so nothing is acknowledged before Redis has it;
under load one round trip (one socket write, one read) carries many commands instead of one each.
`merge` goes further: the items that callers queue under one key before the round trip becomes
one command (the usage events of many requests in one script call, their spend in one increment),
and each of those callers gets that command's reply.

The batcher keeps one connection of the client's pool for itself and drives it as redis-py's
`Pipeline` does (`pack_commands`, `send_packed_command`, then `read_response` per command), without
the pool checkout, command stack and retry wrapper a `Pipeline` takes per flush: these commands are
on the path of every proxied request. Replies come back as Redis sent them (no response callbacks),
and a round trip has one timeout. A failed round trip is not retried (its commands may have run);
its callers see the failure, and the next round trip connects again.

Against a Cluster the round trip is redis-py's own non-transactional `ClusterPipeline` instead,
which sends each command to the node of its key's slot (every merged command names keys of one
hash tag) and follows MOVED/ASK; it does retry a round trip that failed on a connection error, so
there a command may run twice (usage events are de-duplicated by request id downstream).

A command queued `durable` must outlive a failover: its round trip ends with `WAIT` on the same
connection (`Durability`), and when fewer replicas than asked acknowledge it, its callers get
`ReplicasBehind` (the write may be lost; a usage event then goes to the spool and is written from
there, once, since records are keyed by request id).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from gateway.redis.client import RedisClient
from gateway.redis.urls import Durability

ROUND_TRIP_TIMEOUT_S = 5.0  # redis-py's default socket_timeout, for one whole round trip

Command = tuple[EncodableT, ...]
Item = TypeVar("Item")


class ReplicasBehind(RedisError):
    """Fewer replicas than `Durability.min_replicas` acknowledged a durable write in time."""


@dataclass(slots=True)
class _Queued:
    """One command of the next round trip (or what builds it then) and the callers awaiting it."""

    command: Command
    build: Callable[[], Command] | None = None
    waiters: list[asyncio.Future[Any]] = field(default_factory=list)
    durable: bool = False


class PipelineBatcher:
    def __init__(
        self,
        redis: RedisClient,
        *,
        round_trip_timeout_s: float = ROUND_TRIP_TIMEOUT_S,
        durability: Durability | None = None,
    ) -> None:
        self._cluster = redis if isinstance(redis, RedisCluster) else None
        self._pool = None if isinstance(redis, RedisCluster) else redis.connection_pool
        self._timeout_s = round_trip_timeout_s
        self._durability = durability or Durability()
        if self._durability.waits and self._cluster is not None:
            raise ValueError("WAIT after durable writes is not supported against a Cluster")
        self._connection: AbstractConnection | None = None
        self._pending: list[_Queued] = []
        self._merging: dict[Hashable, tuple[list[Any], _Queued]] = {}
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, *command: EncodableT) -> asyncio.Future[Any]:
        """Queue one command (`"XADD", stream, "*", field, value`); the future is its reply.

        Commands queued in the same loop iteration go out together on the next one; while a round
        trip is out, new commands wait for it and then share the following one."""
        return self._wait(self._queue(_Queued(command)))

    def merge(
        self, key: Hashable, item: Item, build: Callable[[list[Item]], Command], *, durable: bool = False
    ) -> asyncio.Future[Any]:
        """Add `item` to the command queued under `key` for the next round trip, `build(items)`
        once it goes out; the future is that command's reply (or error), shared with its other items.
        `durable`: the reply waits for the replicas too (see the module docstring)."""
        merging = self._merging.get(key)
        if merging is None:
            items: list[Item] = []
            queued = _Queued((), lambda: build(items), durable=durable)
            merging = self._merging[key] = (items, self._queue(queued))
        merging[0].append(item)
        return self._wait(merging[1])

    def merge_script(
        self,
        script: AsyncScript,
        key: Hashable,
        item: Item,
        build: Callable[[list[Item]], tuple[Sequence[EncodableT], Sequence[EncodableT]]],
        *,
        durable: bool = False,
    ) -> Awaitable[Any]:
        """`merge` for a script: `build(items)` gives its (keys, args), sent as EVALSHA. The item is
        queued before this returns; the awaitable is the reply. A Redis that lost the script (a
        restart) answers NOSCRIPT; one SCRIPT LOAD, shared by every caller that saw it, restores it,
        and the items go out again."""

        def command(items: list[Item]) -> Command:
            keys, args = build(items)
            return ("EVALSHA", script.sha, len(keys), *keys, *args)

        reply = self.merge((script.sha, key), item, command, durable=durable)
        return self._script_reply(reply, script, key, item, command, durable)

    async def _script_reply(
        self,
        reply: asyncio.Future[Any],
        script: AsyncScript,
        key: Hashable,
        item: Item,
        command: Callable[[list[Item]], Command],
        durable: bool,
    ) -> Any:
        try:
            return await reply
        except NoScriptError:
            if self._cluster is not None:  # a keyless command: redis-py loads it on every primary
                await self._cluster.script_load(script.script)
            else:
                await self.merge(
                    ("SCRIPT LOAD", script.sha), None, lambda _: ("SCRIPT", "LOAD", script.script)
                )
            return await self.merge((script.sha, key), item, command, durable=durable)

    def _queue(self, queued: _Queued) -> _Queued:
        self._pending.append(queued)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._drain(), name="redis-group-commit")
        return queued

    def _wait(self, queued: _Queued) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queued.waiters.append(future)  # one future per caller: a caller giving up cancels only its own
        return future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending, self._merging = self._pending, [], {}
                await self._flush(batch)
        finally:
            self._flusher = None

    async def _flush(self, batch: list[_Queued]) -> None:
        try:
            commands = [queued.command if queued.build is None else queued.build() for queued in batch]
            durable = self._durability.waits and any(queued.durable for queued in batch)
            if durable:
                commands.append(("WAIT", self._durability.min_replicas, self._durability.replica_timeout_ms))
            replies = await self._round_trip(commands)
        except TimeoutError:  # the round trip's own (redis-py's TimeoutError is another)
            _fail(batch, RedisTimeoutError("Redis did not answer a round trip in time"))
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        except BaseException:  # cancelled: the callers learn it, and the cancellation goes on
            _fail(batch, RedisError("Redis round trip cancelled"))
            raise
        behind = durable and not _acknowledged(replies.pop(), self._durability.min_replicas)
        for queued, reply in zip(batch, replies, strict=True):
            # This command's error is for its callers alone.
            if isinstance(reply, Exception):
                _resolve(queued.waiters, error=reply)
            elif behind and queued.durable:
                _resolve(
                    queued.waiters, error=ReplicasBehind("too few replicas acknowledged a durable write")
                )
            else:
                _resolve(queued.waiters, reply=reply)

    async def _round_trip(self, commands: list[Command]) -> list[Any]:
        """The replies to `commands`, in order, an error reply (`ResponseError`, `NoScriptError`,
        ...) in its command's place; raises when the connection fails, Redis answers that it cannot
        serve (LOADING after a restart), or the round trip takes longer than its timeout."""
        if self._cluster is not None:
            return await self._cluster_round_trip(self._cluster, commands)
        async with asyncio.timeout(self._timeout_s):
            connection = await self._ready_connection()
            packed = connection.pack_commands(commands)
            try:
                await connection.send_packed_command(packed)
                replies: list[Any] = []
                for _ in commands:
                    try:
                        replies.append(await connection.read_response())
                    except ResponseError as error:  # the connection reads on to the next reply
                        replies.append(error)
            except BaseException:
                # Replies still due on this connection would answer the next round trip's commands.
                await connection.disconnect(nowait=True)
                raise
            return replies

    async def _cluster_round_trip(self, cluster: RedisCluster, commands: list[Command]) -> list[Any]:
        """The replies to `commands`, each from the node that serves its key; one that failed (an
        error reply, a node unreachable) is an exception in its place."""
        async with asyncio.timeout(self._timeout_s):
            pipe = cluster.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    async def _ready_connection(self) -> AbstractConnection:
        """The batcher's connection: taken from the pool on first use, connected again by its next
        write once it was closed. One that Redis closed while it was idle (a restart) is dropped
        first, as the pool itself checks a connection it hands out."""
        connection = self._connection
        if connection is None:
            assert self._pool is not None  # a Cluster has no one pool: see _cluster_round_trip
            connection = self._connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        elif connection.is_connected:
            try:
                stale = await connection.can_read()  # closed by Redis, or a reply nothing asked for
            except RedisConnectionError:
                stale = True
            if stale:
                await connection.disconnect()
        return connection


def _acknowledged(reply: Any, min_replicas: int) -> bool:
    """Whether WAIT's reply (the replicas that acknowledged, or an error) reaches `min_replicas`."""
    return isinstance(reply, int) and reply >= min_replicas


def _fail(batch: list[_Queued], error: Exception) -> None:
    for queued in batch:
        _resolve(queued.waiters, error=error)


def _resolve(waiters: list[asyncio.Future[Any]], reply: Any = None, error: Exception | None = None) -> None:
    for future in waiters:
        if future.done():
            continue
        if error is None:
            future.set_result(reply)
        else:
            future.set_exception(error)
