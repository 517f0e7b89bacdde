"""Group commit: concurrent commands share a round trip, each caller gets its own reply or error."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from gateway.redis_batching import PipelineBatcher


async def test_each_caller_gets_its_own_reply() -> None:
    redis = fakeredis.FakeAsyncRedis()
    batcher = PipelineBatcher(redis)
    replies = await asyncio.gather(*(batcher.submit("INCRBY", "n", i) for i in range(1, 101)))
    assert sorted(replies)[-1] == sum(range(1, 101))
    assert len(set(replies)) == 100  # every caller saw the counter after its own increment
    assert int(await redis.get("n")) == 5050


async def test_a_failing_command_fails_only_its_caller() -> None:
    redis = fakeredis.FakeAsyncRedis()
    await redis.set("text", "not a number")
    batcher = PipelineBatcher(redis)
    good, bad, after = await asyncio.gather(
        batcher.submit("INCR", "count"),
        batcher.submit("INCR", "text"),
        batcher.submit("INCR", "count"),
        return_exceptions=True,
    )
    assert (good, after) == (1, 2)  # the replies after the error are still read in order
    assert isinstance(bad, ResponseError)


async def test_scripts_run_by_sha_and_a_missing_script_is_noscript() -> None:
    redis = fakeredis.FakeAsyncRedis()
    script = redis.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    batcher = PipelineBatcher(redis)
    with pytest.raises(NoScriptError):
        await batcher.submit("EVALSHA", script.sha, 1, "s", 2)
    await redis.script_load(script.script)
    replies = await asyncio.gather(*(batcher.submit("EVALSHA", script.sha, 1, "s", 2) for _ in range(10)))
    assert sorted(replies) == list(range(2, 21, 2))


async def test_an_unreachable_redis_fails_every_caller_and_a_recovered_one_serves_again() -> None:
    server = fakeredis.FakeServer()
    redis = fakeredis.FakeAsyncRedis(server=server)
    server.connected = False
    batcher = PipelineBatcher(redis)
    results = await asyncio.gather(*(batcher.submit("INCR", "x") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, RedisConnectionError) for r in results)
    server.connected = True
    assert await batcher.submit("INCR", "x") == 1


async def test_commands_of_one_loop_iteration_share_one_round_trip() -> None:
    redis = fakeredis.FakeAsyncRedis()
    batcher = PipelineBatcher(redis)
    await batcher.submit("PING")  # connects
    connection = batcher._connection
    assert connection is not None
    writes = 0
    send = connection.send_packed_command

    async def counted(*args: object, **kwargs: object) -> None:
        nonlocal writes
        writes += 1
        await send(*args, **kwargs)  # type: ignore[arg-type]

    connection.send_packed_command = counted  # type: ignore[method-assign]
    await asyncio.gather(*(batcher.submit("SET", f"k{i}", i) for i in range(50)))
    assert writes == 1
    assert await redis.get("k49") == b"49"
    await batcher.submit("SET", "later", 1)
    assert writes == 2


async def test_commands_queued_during_a_round_trip_share_the_next_one() -> None:
    redis = fakeredis.FakeAsyncRedis()
    batcher = PipelineBatcher(redis)
    first = batcher.submit("INCR", "n")
    await asyncio.sleep(0)  # the first round trip is out
    later = [batcher.submit("INCR", "n") for _ in range(20)]
    assert await first == 1
    assert sorted(await asyncio.gather(*later)) == list(range(2, 22))


async def test_a_caller_that_gave_up_does_not_break_the_others() -> None:
    redis = fakeredis.FakeAsyncRedis()
    batcher = PipelineBatcher(redis)
    abandoned = batcher.submit("INCR", "n")
    kept = batcher.submit("INCR", "n")
    abandoned.cancel()
    assert await kept == 2  # the cancelled caller's command still ran; its reply is dropped
    assert await batcher.submit("GET", "n") == b"2"
