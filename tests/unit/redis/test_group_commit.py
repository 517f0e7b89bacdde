"""Group commit: concurrent commands share a round trip, each caller gets its own reply or error.

On fakeredis and, marked integration, on the machine's Redis; failures a real Redis gives only in
trouble on a scripted local server."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError, NoScriptError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis.client import redis_client
from gateway.redis.group_commit import PipelineBatcher
from tests.support.round_trips import RoundTrips
from tests.support.stores import redis_url
from tests.unit.redis.scripted_redis import ScriptedRedis, plain_answers


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.integration)])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    if request.param == "fakeredis":
        client: Redis = fakeredis.FakeAsyncRedis()
        yield client
    else:
        client = redis_client(redis_url("redis"))
        await client.flushdb()
        yield client
        await client.flushdb()
    await client.aclose()


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedRedis]:
    server = ScriptedRedis()
    yield server
    await server.stop()


def unique_script(redis: Redis, body: str) -> Any:
    """A script no earlier test loaded (Redis keeps loaded scripts across databases)."""
    return redis.register_script(f"-- {uuid.uuid4().hex}\n{body}")


async def test_each_caller_gets_its_own_reply(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    replies = await asyncio.gather(*(batcher.submit("INCRBY", "n", i) for i in range(1, 101)))
    assert sorted(replies)[-1] == sum(range(1, 101))
    assert len(set(replies)) == 100  # every caller saw the counter after its own increment
    assert int(await redis.get("n")) == 5050


async def test_a_failing_command_fails_only_its_caller(redis: Redis) -> None:
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


async def test_replies_come_back_as_redis_sent_them(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    big = bytes(range(256)) * 8192  # 2 MiB, every byte value
    replies = await asyncio.gather(
        batcher.submit("SET", "big", big),
        batcher.submit("GET", "big"),
        batcher.submit("INCRBYFLOAT", "spend", 0.000125),
        batcher.submit("GET", "missing"),
    )
    assert replies == [b"OK", big, b"0.000125", None]  # no response callbacks (SET is not True)


async def test_scripts_run_by_sha_and_a_missing_script_is_noscript(redis: Redis) -> None:
    script = unique_script(redis, "return redis.call('INCRBY', KEYS[1], ARGV[1])")
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


async def test_commands_of_one_loop_iteration_share_one_round_trip(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    await batcher.submit("PING")  # connects
    round_trips = RoundTrips(batcher)
    await asyncio.gather(*(batcher.submit("SET", f"k{i}", i) for i in range(5000)))
    assert round_trips.count == 1
    assert await redis.get("k4999") == b"4999"
    await batcher.submit("SET", "later", 1)
    assert round_trips.count == 2


async def test_commands_queued_during_a_round_trip_share_the_next_one(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    round_trips = RoundTrips(batcher)
    first = batcher.submit("INCR", "n")
    await asyncio.sleep(0)  # the first round trip is out
    later = [batcher.submit("INCR", "n") for _ in range(20)]
    assert await first == 1
    assert sorted(await asyncio.gather(*later)) == list(range(2, 22))
    assert round_trips.count == 2


async def test_a_caller_that_gave_up_does_not_break_the_others(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    abandoned = batcher.submit("INCR", "n")
    kept = batcher.submit("INCR", "n")
    abandoned.cancel()
    assert await kept == 2  # the cancelled caller's command still ran; its reply is dropped
    assert await batcher.submit("GET", "n") == b"2"


async def test_merged_items_go_out_as_one_command_per_key(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    built: list[list[int]] = []

    def incr_by_sum(key: str) -> Any:
        def build(items: list[int]) -> tuple[object, ...]:
            built.append(items)
            return ("INCRBY", key, sum(items))

        return build

    replies = await asyncio.gather(
        *(batcher.merge("a", i, incr_by_sum("a")) for i in range(1, 11)),
        *(batcher.merge("b", i, incr_by_sum("b")) for i in range(3)),
        batcher.submit("INCR", "c"),
    )
    assert replies == [55] * 10 + [3] * 3 + [1]  # every caller of a key has its command's reply
    assert sorted(map(len, built)) == [3, 10]
    assert await batcher.merge("a", 5, incr_by_sum("a")) == 60  # a later round trip: a new command


async def test_a_failing_merged_command_fails_each_of_its_callers(redis: Redis) -> None:
    await redis.set("text", "not a number")
    batcher = PipelineBatcher(redis)
    results = await asyncio.gather(
        *(batcher.merge("t", 1, lambda items: ("INCRBY", "text", len(items))) for _ in range(3)),
        batcher.merge("n", 1, lambda items: ("INCRBY", "n", len(items))),
        return_exceptions=True,
    )
    assert all(isinstance(r, ResponseError) for r in results[:3])
    assert results[3] == 1


async def test_a_merged_caller_that_gave_up_leaves_the_others_their_reply(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    first = batcher.merge("n", 1, lambda items: ("INCRBY", "n", sum(items)))
    second = batcher.merge("n", 2, lambda items: ("INCRBY", "n", sum(items)))
    first.cancel()
    assert await second == 3  # the command still carried both items


async def test_a_script_redis_lost_is_loaded_once_for_every_caller_and_run_again(redis: Redis) -> None:
    script = unique_script(redis, "return redis.call('INCRBY', KEYS[1], ARGV[1])")
    batcher = PipelineBatcher(redis)
    round_trips = RoundTrips(batcher)

    def keys_and_args(items: list[int]) -> tuple[list[str], list[int]]:
        return ["s"], [sum(items)]

    replies = await asyncio.gather(*(batcher.merge_script(script, "s", 2, keys_and_args) for _ in range(10)))
    assert replies == [20] * 10  # the ten items went out again, together, after the load
    assert round_trips.command_names() == ["EVALSHA", "SCRIPT", "EVALSHA"]
    assert await redis.script_exists(script.sha) == [True]
    round_trips.sent.clear()
    assert await batcher.merge_script(script, "s", 1, keys_and_args) == 21
    assert round_trips.command_names() == ["EVALSHA"]


async def test_a_reply_that_says_redis_cannot_serve_fails_its_callers(scripted: ScriptedRedis) -> None:
    """A Redis restarting from its append-only file answers LOADING, which redis-py raises as a
    ConnectionError: a caller given it as a reply would take a usage event for stored."""

    def loading(command: list[bytes]) -> bytes | None:
        if command[0] == b"EVALSHA":
            return b"-LOADING Redis is loading the dataset in memory\r\n"
        return plain_answers(command)

    scripted.answer = loading
    port = await scripted.start()
    batcher = PipelineBatcher(redis_client(f"redis://127.0.0.1:{port}"))
    results = await asyncio.gather(
        batcher.submit("EVALSHA", "a" * 40, 1, "gateway:usage", b"{}"),
        batcher.submit("SET", "k", "v"),
        return_exceptions=True,
    )
    assert isinstance(results[0], BusyLoadingError)
    assert isinstance(results[1], RedisError)  # read after it on a connection given up
    assert await batcher.submit("SET", "k", "v") == b"OK"  # on a new connection
    assert scripted.connections == 2


async def test_a_round_trip_past_its_timeout_fails_and_the_next_one_connects_again(
    scripted: ScriptedRedis,
) -> None:
    scripted.answer = lambda command: None if command == [b"GET", b"slow"] else plain_answers(command)
    port = await scripted.start()
    batcher = PipelineBatcher(redis_client(f"redis://127.0.0.1:{port}"), round_trip_timeout_s=0.2)
    with pytest.raises(RedisError, match="in time"):
        await batcher.submit("GET", "slow")
    # A late answer would be matched to the next command: that one goes on a new connection.
    assert await batcher.submit("SET", "k", "v") == b"OK"
    assert scripted.connections == 2


async def test_a_redis_that_was_down_is_connected_to_once_it_is_back(scripted: ScriptedRedis) -> None:
    with socket.socket() as probe:  # a port nothing listens on yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    batcher = PipelineBatcher(redis_client(f"redis://127.0.0.1:{port}"))
    results = await asyncio.gather(*(batcher.submit("PING") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(result, RedisConnectionError) for result in results), results

    await scripted.start(port)
    assert await batcher.submit("PING") == b"PONG"
