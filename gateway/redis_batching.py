"""Group commit for Redis: commands issued while a round trip is out share the next one.

Each caller still awaits its own command's reply, so nothing is acknowledged before Redis has it;
under load one round trip (one socket write, one read) carries many commands instead of one each.
`merge` goes further: the items that callers queue under one key before the round trip becomes
one command (the usage events of many requests in one script call, their spend in one increment),
and each of those callers gets that command's reply.

The batcher keeps one connection of its own (`gateway.redis_link`) and writes packed commands to it
directly: redis-py's `Pipeline` (a pool checkout, a command stack, response callbacks, a retry
wrapper per flush) costs several times the commands it carries, and these are on the path of every
proxied request. For the same reason a round trip has one timeout, not one per command and reply
(redis-py's `socket_timeout` puts a task and a timer on each).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from gateway.loop_tasks import start_task
from gateway.redis_link import Command, link_for, pack

ROUND_TRIP_TIMEOUT_S = 5.0  # redis-py's default socket_timeout, for one whole round trip
IDLE_RECONNECT_S = 10.0  # the pool's health_check_interval (`gateway.redis_link.RedisPyLink`)

Item = TypeVar("Item")


class _Queued:
    """One command of the next round trip (or what builds it then) and the callers awaiting it."""

    __slots__ = ("build", "command", "waiters")

    def __init__(self, command: Command, build: Callable[[], Command] | None = None) -> None:
        self.command = command
        self.build = build
        self.waiters: list[asyncio.Future[Any]] = []


class PipelineBatcher:
    def __init__(
        self,
        redis: Redis,
        *,
        round_trip_timeout_s: float = ROUND_TRIP_TIMEOUT_S,
        idle_reconnect_s: float = IDLE_RECONNECT_S,
    ) -> None:
        self._link = link_for(redis.connection_pool, round_trip_timeout_s, idle_reconnect_s)
        self._pending: list[_Queued] = []
        self._merging: dict[Hashable, tuple[list[Any], _Queued]] = {}
        self._flusher: asyncio.Task[None] | None = None
        # The loop of the round trips, kept: asyncio.get_running_loop() costs a getpid() system
        # call on CPython 3.11, several per request otherwise.
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, *command: EncodableT) -> asyncio.Future[Any]:
        """Queue one command (`"XADD", stream, "*", field, value`); the future is its reply.

        Commands queued in the same loop iteration go out together on the next one; while a round
        trip is out, new commands wait for it and then share the following one."""
        return self._wait(self._queue(_Queued(command)))

    def merge(self, key: Hashable, item: Item, build: Callable[[list[Item]], Command]) -> asyncio.Future[Any]:
        """Add `item` to the command queued under `key` for the next round trip, `build(items)`
        once it goes out; the future is that command's reply (or error), shared with its other items."""
        merging = self._merging.get(key)
        if merging is None:
            items: list[Item] = []
            merging = self._merging[key] = (items, self._queue(_Queued((), lambda: build(items))))
        merging[0].append(item)
        return self._wait(merging[1])

    def merge_script(
        self,
        script: AsyncScript,
        key: Hashable,
        item: Item,
        build: Callable[[list[Item]], tuple[Sequence[EncodableT], Sequence[EncodableT]]],
    ) -> Awaitable[Any]:
        """`merge` for a script: `build(items)` gives its (keys, args), sent as EVALSHA. The item is
        queued before this returns; the awaitable is the reply. A Redis that lost the script (a
        restart) answers NOSCRIPT; one SCRIPT LOAD, shared by every caller that saw it, restores it,
        and the items go out again."""

        def command(items: list[Item]) -> Command:
            keys, args = build(items)
            return ("EVALSHA", script.sha, len(keys), *keys, *args)

        return self._script_reply(self.merge((script.sha, key), item, command), script, key, item, command)

    async def _script_reply(
        self,
        reply: asyncio.Future[Any],
        script: AsyncScript,
        key: Hashable,
        item: Item,
        command: Callable[[list[Item]], Command],
    ) -> Any:
        try:
            return await reply
        except NoScriptError:
            pass  # loaded after the handler: no await inside one (setup.py, HOT_PATH)
        await self.merge(("SCRIPT LOAD", script.sha), None, lambda _: ("SCRIPT", "LOAD", script.script))
        return await self.merge((script.sha, key), item, command)

    def _queue(self, queued: _Queued) -> _Queued:
        self._pending.append(queued)
        if self._flusher is None:
            loop = self._loop
            if loop is None or not loop.is_running():  # the loop of the last round trip, if it still runs
                loop = self._loop = asyncio.get_running_loop()
            self._flusher = start_task(loop, self._drain(), "redis-round-trip")
        return queued

    def _wait(self, queued: _Queued) -> asyncio.Future[Any]:
        assert self._loop is not None  # set by _queue: a queued command always has a flusher
        future: asyncio.Future[Any] = self._loop.create_future()
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
            replies = await self._link.round_trip(pack(commands), len(commands))
            for queued, reply in zip(batch, replies, strict=True):
                # This command's error, for its callers alone: a ResponseError, or one that says
                # Redis cannot serve it (LOADING after a restart is a ConnectionError to redis-py),
                # which its callers must see as a failure too (a usage event then goes to the spool).
                if isinstance(reply, Exception):
                    _resolve(queued.waiters, error=reply)
                else:
                    _resolve(queued.waiters, reply=reply)
        except BaseException as exc:  # every waiter not yet answered learns of the failure itself
            # The link has closed its connection on a failed write or read: the next flush reconnects.
            if isinstance(exc, TimeoutError):  # the round trip's own (redis-py's TimeoutError is another)
                failure: Exception = RedisTimeoutError("Redis did not answer a round trip in time")
            else:
                failure = exc if isinstance(exc, Exception) else RedisError("Redis round trip cancelled")
            for queued in batch:
                _resolve(queued.waiters, error=failure)
            if not isinstance(exc, Exception):
                raise


def _resolve(waiters: list[asyncio.Future[Any]], reply: Any = None, error: Exception | None = None) -> None:
    for future in waiters:
        if future.done():
            continue
        if error is None:
            future.set_result(reply)
        else:
            future.set_exception(error)
