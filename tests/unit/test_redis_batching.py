"""Group commit: concurrent commands share a pipeline, each caller gets its own reply or error."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.redis_batching import PipelineBatcher


async def test_each_caller_gets_its_own_reply() -> None:
    redis = fakeredis.FakeAsyncRedis()
    batcher = PipelineBatcher(redis)
    replies = await asyncio.gather(*(batcher.submit(lambda p, i=i: p.incrby("n", i)) for i in range(1, 101)))
    assert sorted(replies)[-1] == sum(range(1, 101))
    assert len(set(replies)) == 100  # every caller saw the counter after its own increment
    assert int(await redis.get("n")) == 5050


async def test_a_failing_command_fails_only_its_caller() -> None:
    redis = fakeredis.FakeAsyncRedis()
    await redis.set("text", "not a number")
    batcher = PipelineBatcher(redis)
    good, bad = await asyncio.gather(
        batcher.submit(lambda p: p.incr("count")),
        batcher.submit(lambda p: p.incr("text")),
        return_exceptions=True,
    )
    assert good == 1
    assert isinstance(bad, ResponseError)


async def test_scripts_queue_through_the_pipeline() -> None:
    redis = fakeredis.FakeAsyncRedis()
    script = redis.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    batcher = PipelineBatcher(redis)
    replies = await asyncio.gather(
        *(batcher.submit(lambda p: script(keys=["s"], args=[2], client=p)) for _ in range(10))
    )
    assert sorted(replies) == list(range(2, 21, 2))


async def test_an_unreachable_redis_fails_every_caller() -> None:
    server = fakeredis.FakeServer()
    redis = fakeredis.FakeAsyncRedis(server=server)
    server.connected = False
    batcher = PipelineBatcher(redis)
    with pytest.raises(RedisConnectionError):
        await asyncio.gather(*(batcher.submit(lambda p: p.incr("x")) for _ in range(5)))


async def test_commands_of_one_loop_iteration_share_one_pipeline() -> None:
    redis = fakeredis.FakeAsyncRedis()
    pipelines = 0
    open_pipeline = redis.pipeline

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal pipelines
        pipelines += 1
        return open_pipeline(*args, **kwargs)  # type: ignore[arg-type]

    redis.pipeline = counted  # type: ignore[method-assign]
    batcher = PipelineBatcher(redis)

    await asyncio.gather(*(batcher.submit(lambda p, i=i: p.set(f"k{i}", i)) for i in range(50)))
    assert pipelines == 1
    await batcher.submit(lambda p: p.set("later", 1))
    assert pipelines == 2
