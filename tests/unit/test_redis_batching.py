"""Group commit: concurrent commands share a round trip, each caller gets its own reply or error.

On fakeredis (through `RedisPyLink`) and, marked integration, on the machine's Redis (through
`RespLink`, the gateway's own connection)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import BusyLoadingError, DataError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis_batching import PipelineBatcher
from gateway.redis_link import RedisPyLink, RespLink, pack
from gateway.services import redis_client
from tests.support.round_trips import RoundTrips

REAL_REDIS_URL = "redis://127.0.0.1:6379/15"  # these tests' own db, flushed before and after each


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.integration)])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    if request.param == "fakeredis":
        client: Redis = fakeredis.FakeAsyncRedis()
        yield client
    else:
        client = redis_client(REAL_REDIS_URL)
        await client.flushdb()
        yield client
        await client.flushdb()
    await client.aclose()


def unique_script(redis: Redis, body: str) -> Any:
    """A script no earlier test loaded (Redis keeps loaded scripts across databases)."""
    return redis.register_script(f"-- {uuid.uuid4().hex}\n{body}")


async def test_the_gateways_client_gets_the_resp_link_and_others_redis_py_s() -> None:
    assert isinstance(PipelineBatcher(redis_client(REAL_REDIS_URL))._link, RespLink)
    assert isinstance(PipelineBatcher(redis_client("unix:///run/redis.sock?db=2"))._link, RespLink)
    assert isinstance(PipelineBatcher(redis_client("rediss://127.0.0.1:6379/0"))._link, RedisPyLink)
    assert isinstance(PipelineBatcher(fakeredis.FakeAsyncRedis())._link, RedisPyLink)
    decoding = Redis.from_url(REAL_REDIS_URL, decode_responses=True)
    assert isinstance(PipelineBatcher(decoding)._link, RedisPyLink)


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
    await asyncio.gather(*(batcher.submit("SET", f"k{i}", i) for i in range(50)))
    assert round_trips.count == 1
    assert await redis.get("k49") == b"49"
    await batcher.submit("SET", "later", 1)
    assert round_trips.count == 2


async def test_commands_queued_during_a_round_trip_share_the_next_one(redis: Redis) -> None:
    batcher = PipelineBatcher(redis)
    first = batcher.submit("INCR", "n")
    await asyncio.sleep(0)  # the first round trip is out
    later = [batcher.submit("INCR", "n") for _ in range(20)]
    assert await first == 1
    assert sorted(await asyncio.gather(*later)) == list(range(2, 22))


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

    def incr_by_sum(key: str) -> object:
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
    sent = RoundTrips(batcher).sent  # what went to the connection

    def keys_and_args(items: list[int]) -> tuple[list[str], list[int]]:
        return ["s"], [sum(items)]

    replies = await asyncio.gather(*(batcher.merge_script(script, "s", 2, keys_and_args) for _ in range(10)))
    assert replies == [20] * 10  # the ten items went out again, together, after the load
    assert re.findall(rb"\r\n(EVALSHA|SCRIPT)\r\n", b"".join(sent)) == [b"EVALSHA", b"SCRIPT", b"EVALSHA"]
    assert await redis.script_exists(script.sha) == [True]
    sent.clear()
    assert await batcher.merge_script(script, "s", 1, keys_and_args) == 21
    assert re.findall(rb"\r\n(EVALSHA|SCRIPT)\r\n", b"".join(sent)) == [b"EVALSHA"]


def test_commands_are_packed_as_redis_py_packs_them() -> None:
    commands = [
        ("EVALSHA", "a" * 40, 1, "gateway:usage", b'{"request_id":"req_1"}', b"x" * 70_000),
        ("INCRBYFLOAT", "spend:t\u00e9am", 0.000125, -3, 12345678901234567890),
        ("SET", bytearray(b"k"), memoryview(b"v")),
        ("PING",),
        ("MSET", *(f"k{i}" for i in range(70))),  # past the prefixes formatted in advance
        ("SET", "k", b"v" * 1023),
        ("SET", "k", b"v" * 1024),
    ]
    expected = b"".join(bytes(chunk) for chunk in Connection().pack_commands(commands))
    assert pack(commands) == expected


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError):
        pack([("SET", "k", True)])


async def test_a_reply_that_says_redis_cannot_serve_fails_its_caller() -> None:
    """A Redis restarting from its append-only file answers LOADING, which redis-py raises as a
    ConnectionError: a caller given it as a reply would take a usage event for stored."""

    class Loading:
        async def round_trip(self, packed: bytes, count: int) -> list[Any]:
            return [BusyLoadingError("Redis is loading the dataset in memory")] * count

    batcher = PipelineBatcher(fakeredis.FakeAsyncRedis())
    batcher._link = Loading()
    with pytest.raises(BusyLoadingError):
        await batcher.submit("EVALSHA", "a" * 40, 1, "gateway:usage", b"{}")
