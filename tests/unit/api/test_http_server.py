"""The response-write coalescing under uvicorn: fewer writes, the same bytes in the same order."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.http_server import CoalescingTransport, HttpToolsProtocol


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.events.append("write")

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def abort(self) -> None:
        self.closing = True
        self.events.append("abort")

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0


async def test_a_head_and_its_body_go_out_as_one_write() -> None:
    socket_side = RecordingTransport()
    transport = CoalescingTransport(socket_side, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert socket_side.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)
    assert len(socket_side.writes) == 1  # nothing held back, nothing written twice


async def test_a_head_alone_goes_out_when_the_iteration_ends_and_frames_at_once() -> None:
    socket_side = RecordingTransport()
    transport = CoalescingTransport(socket_side, asyncio.get_running_loop())
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    transport.write(head)
    assert socket_side.writes == []
    assert transport.get_write_buffer_size() == len(head)
    await asyncio.sleep(0)
    assert socket_side.writes == [head]
    transport.write(b"9\r\ndata: 1\n\n\r\n")  # a stream frame: not held
    assert socket_side.writes == [head, b"9\r\ndata: 1\n\n\r\n"]


async def test_close_writes_what_is_held_first_and_abort_drops_it() -> None:
    socket_side = RecordingTransport()
    transport = CoalescingTransport(socket_side, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.close()
    assert socket_side.events == ["write", "close"]
    assert socket_side.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]

    dropped = RecordingTransport()
    transport = CoalescingTransport(dropped, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.abort()
    await asyncio.sleep(0)
    assert dropped.events == ["abort"]


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/stream":
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        for i in range(3):
            await send({"type": "http.response.body", "body": b"chunk %d;" % i, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    body = scope["path"].encode() * 1000
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_uvicorn_serves_whole_responses_and_streams_through_it(loop: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, http=HttpToolsProtocol, loop=loop, log_level="error"
    )
    server = uvicorn.Server(config)

    async def exercise() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                for path in ("/a", "/bb", "/ccc"):  # one kept-alive connection, several responses
                    reply = await client.get(path)
                    assert reply.status_code == 200
                    assert reply.content == path.encode() * 1000
                async with client.stream("GET", "/stream") as stream:
                    pieces = [piece async for piece in stream.aiter_raw()]
                assert b"".join(pieces) == b"chunk 0;chunk 1;chunk 2;"
                assert len(pieces) >= 3  # each chunk left as it was sent, not held for the end
        finally:
            server.should_exit = True
            await serving

    if loop == "uvloop":
        import uvloop

        uvloop.run(exercise())
    else:
        asyncio.run(exercise())
