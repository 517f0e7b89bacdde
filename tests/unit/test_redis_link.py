"""`RespConnection` fed bytes as a socket would deliver them: replies split anywhere, replies
nothing asked for, bytes that are not RESP, a round trip that times out or is given up."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import BusyLoadingError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.redis_link import RespConnection, RespLink, pack
from tests.support.transport import RecordingTransport


def connected() -> tuple[RespConnection, RecordingTransport]:
    connection, transport = RespConnection(asyncio.get_running_loop()), RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


REPLIES = (
    b"+OK\r\n:42\r\n$5\r\nhello\r\n*2\r\n$1\r\na\r\n$-1\r\n-NOSCRIPT No matching script.\r\n-ERR nope\r\n"
    b"-LOADING Redis is loading the dataset in memory\r\n"
)


async def test_replies_split_at_every_byte_are_handed_over_once_the_last_is_in() -> None:
    connection, transport = connected()
    replies = connection.round_trip(b"packed", 7)
    assert transport.writes == [b"packed"]
    for i in range(len(REPLIES)):
        assert not replies.done()
        connection.data_received(REPLIES[i : i + 1])
    ok, number, text, array, noscript, error, loading = await replies
    assert (ok, number, text, array) == (b"OK", 42, b"hello", [b"a", None])
    assert isinstance(noscript, NoScriptError)  # as redis-py raises it, for the batcher's reload
    assert type(error) is ResponseError and str(error) == "nope"
    assert isinstance(loading, BusyLoadingError)  # a restarting Redis: a failure, not a reply
    assert not transport.aborted


@pytest.mark.parametrize(
    ("data", "error"),
    [(b"+OK\r\n+EXTRA\r\n", "nothing asked for"), (b"HTTP/1.1 400 Bad Request\r\n", "Protocol error")],
    ids=["a reply nothing asked for", "bytes that are not RESP"],
)
async def test_what_no_command_can_match_fails_the_round_trip_and_closes_the_connection(
    data: bytes, error: str
) -> None:
    connection, transport = connected()
    replies = connection.round_trip(b"packed", 1)
    connection.data_received(data)
    with pytest.raises(RedisConnectionError, match=error):
        await replies
    assert transport.aborted and connection.closed


async def test_a_closed_connection_fails_the_round_trip_out_and_every_later_one() -> None:
    connection, _ = connected()
    replies = connection.round_trip(b"packed", 2)
    connection.data_received(b"+OK\r\n")
    connection.connection_lost(None)
    with pytest.raises(RedisConnectionError, match="closed by server"):
        await replies
    with pytest.raises(RedisConnectionError):
        await connection.round_trip(b"packed", 1)


async def test_a_round_trip_past_its_timeout_or_given_up_closes_the_connection() -> None:
    link = RespLink({}, round_trip_timeout_s=0.05)
    link._connection, transport = connected()
    link._loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):  # the batcher reports it as redis-py's TimeoutError
        await link.round_trip(pack([("PING",)]), 1)
    assert transport.aborted  # a late reply would be matched to the next command otherwise

    link._connection, transport = connected()
    task = asyncio.create_task(link.round_trip(pack([("PING",)]), 1))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert transport.aborted
