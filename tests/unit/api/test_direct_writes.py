"""A whole response past uvicorn's `send`: the bytes uvicorn would write, keep-alive and close kept."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn

from gateway.api.direct_writes import DIRECT_WRITES, send_chunk, send_whole
from gateway.http_server import HttpToolsProtocol


class Protocol(HttpToolsProtocol):
    """uvicorn turns its access log on when its logger has handlers, which pytest's log capture
    adds; `gateway serve` runs without one. Said here, not left to the test run's logging."""

    access_log_on = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = self.access_log_on


class LoggingProtocol(Protocol):
    access_log_on = True


HEADERS = [(b"content-type", b"application/json"), (b"x-request-id", b"req_1")]
BAD_HEADERS = {"/bad-value": (b"x-evil", b"a\r\nset-cookie: x=1"), "/bad-name": (b"x evil", b"1")}
seen: list[Any] = []


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    ref = scope.get("extensions", {}).get(DIRECT_WRITES)
    cycle = ref() if ref is not None else None
    seen.append(ref)
    if scope["path"] == "/via-send":  # uvicorn's own path, for comparison
        body = b'{"ok":true}'
        headers = [HEADERS[0], (b"content-length", b"%d" % len(body)), HEADERS[1]]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    assert cycle is not None
    if scope["path"] in ("/stream", "/stream-via-send"):
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        for frame in (b"data: 1\n\n", b"", b"data: 22\n\n"):
            if scope["path"] == "/stream-via-send" or not send_chunk(cycle, frame):
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    bad = BAD_HEADERS.get(scope["path"])
    if bad is not None:
        try:
            send_whole(cycle, 200, [bad], b"")
        except RuntimeError:
            send_whole(cycle, 500, [], b"refused")
        return
    send_whole(cycle, 404 if scope["path"] == "/missing" else 200, HEADERS, b'{"ok":true}')
    with pytest.raises(RuntimeError):  # one response per request, as with send
        send_whole(cycle, 200, HEADERS, b"again")


@contextlib.asynccontextmanager
async def serving(protocol: type[HttpToolsProtocol]) -> AsyncIterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=free, http=protocol, log_level="error", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    seen.clear()
    try:
        yield free
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with serving(Protocol) as free:
        yield free


async def _exchange(port: int, raw: bytes) -> tuple[bytes, bool]:
    """The bytes answered to `raw`, and whether the server then closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    data = b""
    closed = False
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 0.5)
        except TimeoutError:
            break
        if not chunk:
            closed = True
            break
        data += chunk
    writer.close()
    return data, closed


def _without_date(response: bytes) -> bytes:
    return b"".join(line for line in response.splitlines(keepends=True) if not line.startswith(b"date: "))


async def test_the_bytes_are_those_uvicorn_writes_and_the_connection_stays_open(port: int) -> None:
    request = b"POST /%s HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
    whole, closed = await _exchange(port, request % b"whole")
    assert not closed
    assert whole.startswith(b"HTTP/1.1 200 OK\r\ndate: ")
    assert _without_date(whole) == (
        b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: application/json\r\nx-request-id: req_1\r\n"
        b'content-length: 11\r\n\r\n{"ok":true}'
    )
    via_send, _ = await _exchange(port, request % b"via-send")
    head, body = _without_date(via_send).split(b"\r\n\r\n")
    assert sorted(head.split(b"\r\n")) == sorted(_without_date(whole).split(b"\r\n\r\n")[0].split(b"\r\n"))
    assert body == b'{"ok":true}'


async def test_keep_alive_serves_the_next_request_on_the_same_connection(port: int) -> None:
    one = b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
    two = b"POST /missing HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
    data, closed = await _exchange(port, one + two)  # pipelined: the second waits for the first
    assert data.count(b"HTTP/1.1 ") == 2
    assert data.index(b"HTTP/1.1 200 OK") < data.index(b"HTTP/1.1 404 Not Found")
    assert not closed


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        b"POST /a HTTP/1.0\r\ncontent-length: 0\r\n\r\n",
    ],
)
async def test_a_connection_the_client_ends_is_closed_after_the_response(port: int, raw: bytes) -> None:
    data, closed = await _exchange(port, raw)
    assert b"\r\nconnection: close\r\n" in data
    assert data.endswith(b'\r\n\r\n{"ok":true}')
    assert closed


@pytest.mark.parametrize("path", [b"/bad-value", b"/bad-name"])
async def test_a_header_that_could_split_the_response_is_refused(port: int, path: bytes) -> None:
    data, _ = await _exchange(port, b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n" % path)
    assert data.startswith(b"HTTP/1.1 500 ")
    assert b"set-cookie" not in data and b"x evil" not in data
    assert data.endswith(b"\r\n\r\nrefused")


async def test_no_extension_when_uvicorn_writes_an_access_log() -> None:
    async with serving(LoggingProtocol) as free:
        request = b"POST /via-send HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
        data, _ = await _exchange(free, request)
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert seen == [None]


async def test_stream_frames_go_out_in_uvicorns_chunked_framing(port: int) -> None:
    request = b"POST /%s HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
    direct, closed = await _exchange(port, request % b"stream")
    via_send, _ = await _exchange(port, request % b"stream-via-send")
    assert not closed
    assert _without_date(direct) == _without_date(via_send)
    assert direct.endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\na\r\ndata: 22\n\n\r\n0\r\n\r\n")


def test_a_frame_is_left_to_send_while_writing_is_paused_or_the_client_is_gone() -> None:
    class Transport:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write_now(self, data: bytes) -> None:
            self.writes.append(data)

    def cycle(**state: bool) -> SimpleNamespace:
        defaults = {"disconnected": False, "response_complete": False, "chunked_encoding": True}
        flow = SimpleNamespace(write_paused=state.pop("write_paused", False))
        return SimpleNamespace(flow=flow, transport=Transport(), **(defaults | state))

    writing = cycle()
    assert send_chunk(writing, b"data: 1\n\n")
    assert writing.transport.writes == [b"9\r\ndata: 1\n\n\r\n"]
    for state in ({"write_paused": True}, {"disconnected": True}, {"response_complete": True}):
        held = cycle(**state)
        assert not send_chunk(held, b"data: 1\n\n")  # uvicorn's send waits, or drops it
        assert held.transport.writes == []
    assert not send_chunk(cycle(chunked_encoding=False), b"x")  # a content-length response: send


async def test_a_served_requests_cycle_is_freed_without_the_garbage_collector(port: int) -> None:
    """The scope holds its cycle weakly: a strong reference would close a loop (the cycle holds
    the scope) that only a collection frees, a few kilobytes a request until then."""
    one = b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
    gc.collect()
    gc.disable()
    try:
        await _exchange(port, one + one)  # the second request replaces the first in the protocol
        await asyncio.sleep(0.05)
        assert len(seen) == 2
        assert [ref() for ref in seen] == [None, None]
    finally:
        gc.enable()
