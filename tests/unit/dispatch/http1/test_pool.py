"""The upstream HTTP/1.1 client against a scripted TCP server: framing, reuse, failures, timeouts.

The server is a real socket on a random port; each test says, byte for byte, what it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvloop

from gateway.dispatch.http1.connection import target_of
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.errors import (
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnavailable,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


class Scripted:
    """A TCP server running `handler` per connection; counts connections and keeps request heads."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    @classmethod
    def answering(cls, response: bytes) -> Scripted:
        """A server that reads one request per connection and answers it with `response`."""

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await server.read_request(reader)
            writer.write(response)
            await writer.drain()

        server = cls(handler)
        return server

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions?x=1"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.handler(reader, writer)
        writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return body


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool()
    yield pool
    await pool.aclose()


async def fetch(
    pool: UpstreamPool, url: str, body: bytes = b"{}", read_timeout: float = 5.0
) -> tuple[int, bytes]:
    reply = await pool.request(
        "POST", url, {"authorization": "Bearer k"}, body, connect_timeout=5.0, read_timeout=read_timeout
    )
    try:
        return reply.status, b"".join([chunk async for chunk in reply.chunks()])
    finally:
        await reply.aclose()


async def test_the_request_head_carries_target_host_headers_and_length(pool: UpstreamPool) -> None:
    async with Scripted.answering(OK) as server:
        status, body = await fetch(pool, server.url, b'{"a":1}')
    assert (status, body) == (200, b'{"ok":true}')
    head, _, sent = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?x=1 HTTP/1.1"
    assert b"host: " + target_of(server.url).host_header in lines
    assert b"authorization: Bearer k" in lines
    assert b"content-length: 7" in lines
    assert sent == b'{"a":1}'


async def test_a_kept_alive_connection_is_reused(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(OK)
            await writer.drain()

    async with Scripted(handler) as server:
        for _ in range(5):
            assert await fetch(pool, server.url) == (200, b'{"ok":true}')
    assert server.connections == 1
    assert len(server.requests) == 5


async def test_chunks_arrive_before_the_body_ends(pool: UpstreamPool) -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()

    async with Scripted(handler) as server:
        reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
        chunks = reply.chunks()
        assert await anext(chunks) == b"first"  # the rest is still held by the server
        release.set()
        assert [chunk async for chunk in chunks] == [b"second"]
        await reply.aclose()


async def test_a_body_delimited_by_the_end_of_the_connection(pool: UpstreamPool) -> None:
    async with Scripted.answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it") as server:
        assert await fetch(pool, server.url) == (200, b"all of it")
        assert await fetch(pool, server.url) == (200, b"all of it")
    assert server.connections == 2  # "connection: close" is never reused


async def test_header_names_are_read_in_lower_case_whatever_the_upstream_sent(pool: UpstreamPool) -> None:
    async with Scripted.answering(
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nCONTENT-LENGTH: 2\r\n\r\n{}"
    ) as server:
        reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
        assert reply.status == 429
        assert reply.headers["retry-after"] == "7"
        assert reply.headers["content-length"] == "2"
        await reply.aclose()


@pytest.mark.parametrize("length_header", [b"content-length", b"Content-Length", b"CONTENT-LENGTH"])
async def test_a_body_cut_short_is_an_error_however_its_length_is_spelled(
    pool: UpstreamPool, length_header: bytes
) -> None:
    async with Scripted.answering(
        b"HTTP/1.1 200 OK\r\n" + length_header + b": 100\r\n\r\nonly this"
    ) as server:
        with pytest.raises(UpstreamError, match="mid-response"):
            await fetch(pool, server.url)


async def test_a_connection_closed_before_answering_is_unavailable(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)

    async with Scripted(handler) as server:
        with pytest.raises(UpstreamUnavailable):
            await fetch(pool, server.url)


async def test_a_refused_connection_is_unavailable(pool: UpstreamPool) -> None:
    async with Scripted(lambda r, w: asyncio.sleep(0)) as server:
        url = server.url
    with pytest.raises(UpstreamUnavailable):
        await fetch(pool, url)


async def test_silence_is_a_timeout_and_the_connection_is_not_reused(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if server.connections == 1:
            await asyncio.sleep(10)
        writer.write(OK)
        await writer.drain()

    async with Scripted(handler) as server:
        with pytest.raises(UpstreamTimeout):
            await fetch(pool, server.url, read_timeout=0.2)
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')
    assert server.connections == 2


async def test_silence_mid_body_is_a_timeout(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await writer.drain()
        await asyncio.sleep(10)

    async with Scripted(handler) as server:
        with pytest.raises(UpstreamTimeout):
            await fetch(pool, server.url, read_timeout=0.2)


async def test_garbage_is_an_invalid_response(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"this is not http\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with Scripted(handler) as server:
        with pytest.raises(UpstreamError, match="invalid HTTP response"):
            await fetch(pool, server.url)


async def test_an_interim_100_continue_is_skipped(pool: UpstreamPool) -> None:
    async with Scripted.answering(b"HTTP/1.1 100 Continue\r\n\r\n" + OK) as server:
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')


async def test_an_idle_connection_the_upstream_closed_is_not_reused(pool: UpstreamPool) -> None:
    async with Scripted.answering(OK) as server:  # one answer, then the connection closes
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')
        await asyncio.sleep(0.05)  # the close reaches the pool
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')
    assert server.connections == 2


async def test_a_reply_left_unread_does_not_return_its_connection(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\none\r\n")
            await writer.drain()

    async with Scripted(handler) as server:
        for _ in range(2):
            reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
            assert await anext(reply.chunks()) == b"one"
            await reply.aclose()  # the client went away mid-stream
    assert server.connections == 2


async def test_a_large_body_arrives_whole_through_flow_control(pool: UpstreamPool) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, several times the read-pause threshold

    async with Scripted.answering(
        b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload
    ) as server:
        reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
        received = []
        async for chunk in reply.chunks():
            received.append(chunk)
            await asyncio.sleep(0)  # a slow reader
        await reply.aclose()
    assert b"".join(received) == payload


async def test_read_gives_the_whole_body_and_reuses_the_connection(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await writer.drain()
            writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
            await writer.drain()

    async with Scripted(handler) as server:
        for _ in range(2):
            reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
            assert await reply.read(limit=11) == b"firstsecond"
            await reply.aclose()
    assert server.connections == 1


async def test_read_past_its_limit_is_too_large(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await server.read_request(reader)
                writer.write(OK)
                await writer.drain()

    async with Scripted(handler) as server:
        reply = await pool.request("POST", server.url, {}, b"{}", connect_timeout=5, read_timeout=5)
        with pytest.raises(UpstreamTooLarge):
            await reply.read(limit=10)  # the body is 11 bytes
        await reply.aclose()
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')  # the pool goes on


async def test_a_header_with_a_line_break_is_never_sent(pool: UpstreamPool) -> None:
    async with Scripted(lambda r, w: asyncio.sleep(0)) as server:
        with pytest.raises(UpstreamMisconfigured):
            await pool.request(
                "POST", server.url, {"x-key": "a\r\nx-evil: 1"}, b"{}", connect_timeout=5, read_timeout=5
            )
    assert server.connections == 0


async def test_a_url_that_is_not_http_is_misconfigured(pool: UpstreamPool) -> None:
    with pytest.raises(UpstreamMisconfigured):
        await pool.request("POST", "ftp://example.com/x", {}, b"", connect_timeout=1, read_timeout=1)


async def test_exchanges_beyond_the_cap_wait_for_a_free_connection() -> None:
    release = asyncio.Event()
    open_now = peak = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak
        while True:  # kept alive, as a real upstream would
            await server.read_request(reader)
            open_now += 1
            peak = max(peak, open_now)
            await release.wait()
            open_now -= 1
            writer.write(OK)
            await writer.drain()

    pool = UpstreamPool(max_per_origin=2)
    async with Scripted(handler) as server:
        calls = [asyncio.create_task(fetch(pool, server.url)) for _ in range(5)]
        await asyncio.sleep(0.2)
        assert (len(server.requests), peak) == (2, 2)  # three wait for a slot
        release.set()
        assert await asyncio.gather(*calls) == [(200, b'{"ok":true}')] * 5
    await pool.aclose()
    assert peak == 2


async def test_waiting_for_a_connection_gives_up_at_the_connect_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await asyncio.sleep(10)

    pool = UpstreamPool(max_per_origin=1)
    async with Scripted(handler) as server:
        busy = asyncio.create_task(fetch(pool, server.url, read_timeout=5))
        await asyncio.sleep(0.1)
        with pytest.raises(UpstreamTimeout, match="stayed busy"):
            await pool.request("POST", server.url, {}, b"{}", connect_timeout=0.2, read_timeout=5)
        busy.cancel()
    await pool.aclose()


async def test_failed_exchanges_give_their_slot_back() -> None:
    pool = UpstreamPool(max_per_origin=1)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if server.connections <= 3:
            return  # closed without an answer
        writer.write(OK)
        await writer.drain()

    async with Scripted(handler) as server:
        for _ in range(3):
            with pytest.raises(UpstreamUnavailable):
                await fetch(pool, server.url)
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')
    await pool.aclose()


def test_the_same_exchanges_over_uvloop() -> None:
    """`gateway serve` runs uvloop, whose transports differ from asyncio's in small ways."""

    async def scenario() -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                await server.read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n")
                await writer.drain()

        pool = UpstreamPool()
        async with Scripted(handler) as server:
            assert [await fetch(pool, server.url) for _ in range(3)] == [(200, b"one")] * 3
        await pool.aclose()
        assert server.connections == 1

    uvloop.run(scenario())


async def test_slots_given_up_while_waiting_or_held_are_not_lost() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            if server.connections == 1:
                await asyncio.sleep(10)  # the first exchange hangs until it is given up
            writer.write(OK)
            await writer.drain()

    pool = UpstreamPool(max_per_origin=1)
    async with Scripted(handler) as server:
        busy = asyncio.create_task(fetch(pool, server.url, read_timeout=5))
        await asyncio.sleep(0.1)
        waiting = asyncio.create_task(fetch(pool, server.url))
        await asyncio.sleep(0.05)
        waiting.cancel()  # gives up while waiting for the slot
        busy.cancel()  # gives up while holding it
        for given_up in (waiting, busy):
            with contextlib.suppress(asyncio.CancelledError):
                await given_up
        assert await fetch(pool, server.url) == (200, b'{"ok":true}')
    await pool.aclose()
