"""Group commit for Redis: commands issued in the same event-loop tick share one pipelined round trip.

Each caller still awaits its own command's reply, so nothing is acknowledged before Redis has it;
under load one round trip (and one socket write) carries many commands instead of one each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

AddCommand = Callable[[Pipeline], Awaitable[Any] | Any]  # queues exactly one command on the pipeline


class PipelineBatcher:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pending: list[tuple[AddCommand, asyncio.Future[Any]]] = []
        self._scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()

    async def submit(self, add: AddCommand) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((add, future))
        if not self._scheduled:
            self._scheduled = True
            task = asyncio.create_task(self._flush())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        return await future

    async def _flush(self) -> None:
        # The flush runs on the next loop iteration: what this one submits (the requests whose
        # replies arrived together) joins it; waiting one more iteration only adds latency.
        batch, self._pending, self._scheduled = self._pending, [], False
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for add, _ in batch:
                    queued = add(pipe)
                    if asyncio.iscoroutine(queued):
                        await queued  # scripts queue their EVALSHA through a coroutine
                replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # every waiter learns of the failure and handles it itself
            failure = exc if isinstance(exc, Exception) else RedisError("pipeline cancelled")
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
