"""`gateway.http_protocol` under a real uvicorn server: the bytes on the wire are those uvicorn's own
httptools protocol writes, for the same apps and requests; then what it does beyond uvicorn (one
write per response, the direct writes, one keep-alive timer per idle period)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, HttpToolsProtocol

from gateway.http_cycle import DIRECT_WRITES, Cycle, check_header_names, check_header_values
from gateway.http_protocol import HttpProtocol
from tests.support.transport import RecordingTransport

HEADERS = [(b"content-type", b"application/json"), (b"x-request-id", b"req_1")]
BAD_HEADERS = {"/bad-value": (b"x-evil", b"a\r\nset-cookie: x=1"), "/bad-name": (b"x evil", b"1")}
seen: list[Any] = []  # the DIRECT_WRITES extension of each request served


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Apps through ASGI messages only: both protocols must answer them byte for byte alike."""
    ref = scope.get("extensions", {}).get(DIRECT_WRITES)
    seen.append(ref)
    path = scope["path"]
    if path == "/echo":  # the request body, read in as many messages as it arrives
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})
    elif path == "/stream":  # no content-length: chunked
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        for frame in (b"data: 1\n\n", b"", b"data: 22\n\n"):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif path.startswith("/scope"):  # what the request line became in the scope
        body = repr((path, scope["raw_path"], scope["query_string"], scope["method"])).encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/close":
        headers = [(b"content-length", b"2"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
    elif path == "/raises":
        raise ValueError("boom")
    elif path == "/nothing":
        return
    elif path == "/disconnect":  # waits for the client to leave, then tells the test
        message = await receive()
        while message["type"] != "http.disconnect":
            message = await receive()
        disconnected.set()
    else:
        body = b'{"ok":true}'
        headers = [HEADERS[0], (b"content-length", b"%d" % len(body)), HEADERS[1]]
        await send(
            {"type": "http.response.start", "status": 404 if path == "/missing" else 200, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body})


disconnected = asyncio.Event()


async def _direct_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The proxy front's writes: `Cycle.write_whole` and `Cycle.write_frame`."""
    cycle: Cycle = scope["extensions"][DIRECT_WRITES]
    seen.append(cycle)
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        for frame in (b"data: 1\n\n", b"", b"data: 22\n\n"):
            assert cycle.write_frame(frame)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    bad = BAD_HEADERS.get(path)
    if bad is not None:
        try:
            cycle.write_whole(200, [bad], b"")
        except RuntimeError:
            cycle.write_whole(500, [], b"refused")
        return
    cycle.write_whole(404 if path == "/missing" else 200, HEADERS, b'{"ok":true}')
    with pytest.raises(RuntimeError):  # one response per request, as with send
        cycle.write_whole(200, HEADERS, b"again")


@contextlib.asynccontextmanager
async def serving(protocol: type[asyncio.Protocol], app: Any = _app, **options: Any) -> AsyncIterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    options.setdefault("log_level", "error")
    options.setdefault("access_log", False)  # as `gateway serve` runs it
    config = uvicorn.Config(app, host="127.0.0.1", port=free, http=protocol, lifespan="off", **options)
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


async def exchange(port: int, raw: bytes, *, wait_s: float = 0.3, then: bytes = b"") -> tuple[bytes, bool]:
    """The bytes answered to `raw` (and `then`, sent once something came back), and whether the
    server closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    data, closed = b"", False
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), wait_s)
        except TimeoutError:
            break
        if not chunk:
            closed = True
            break
        data += chunk
        if then:
            writer.write(then)
            then = b""
    writer.close()
    return data, closed


def without_date(response: bytes) -> bytes:
    return b"".join(line for line in response.splitlines(keepends=True) if not line.startswith(b"date: "))


def post(path: bytes, body: bytes = b"", *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n" % (path, len(body))
    return head + b"".join(line + b"\r\n" for line in extra) + b"\r\n" + body


REQUESTS = {
    "whole": post(b"/a"),
    "not found": post(b"/missing"),
    "stream": post(b"/stream"),
    "no content": post(b"/empty"),
    "app closes": post(b"/close"),
    "client closes": post(b"/a", b"", b"connection: close"),
    "http/1.0": b"POST /a HTTP/1.0\r\ncontent-length: 0\r\n\r\n",
    "head": b"HEAD /stream HTTP/1.1\r\nhost: x\r\n\r\n",
    "body": post(b"/echo", b"x" * 100_000),
    "chunked body": b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    "pipelined": post(b"/a") + post(b"/missing") + post(b"/echo", b"third"),
    "percent path and query": b"GET /a%20b?x=1 HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of a plain path": b"GET /scope/v1/chat HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of a query": b"GET /scope?a=1&b=%20 HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of an empty query": b"GET /scope? HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of a percent path": b"GET /scope%2Fx%20y HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of an absolute url": b"GET http://x/scope/abs?q=1 HTTP/1.1\r\nhost: x\r\n\r\n",
    "scope of a fragment": b"GET /scope/f#part HTTP/1.1\r\nhost: x\r\n\r\n",
    "a path not in ascii": b"GET /scope/\xc3\xa9 HTTP/1.1\r\nhost: x\r\n\r\n",
    "a query not in ascii": b"GET /scope?q=\xc3\xa9 HTTP/1.1\r\nhost: x\r\n\r\n",
    "a path of latin-1 bytes": b"GET /scope/\xe9 HTTP/1.1\r\nhost: x\r\n\r\n",
    "app raises": post(b"/raises"),
    "app answers nothing": post(b"/nothing"),
    "not http": b"NOT HTTP AT ALL\r\n\r\n",
    "upgrade": b"GET /a HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
}


@pytest.mark.parametrize("raw", REQUESTS.values(), ids=REQUESTS.keys())
async def test_the_bytes_are_those_uvicorns_protocol_writes(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="uvicorn.error")  # the apps that fail on purpose
    async with serving(HttpToolsProtocol) as port:
        theirs, they_closed = await exchange(port, raw)
    async with serving(HttpProtocol) as port:
        ours, we_closed = await exchange(port, raw)
    assert without_date(ours) == without_date(theirs)
    assert we_closed == they_closed
    assert ours  # every request had an answer


async def test_expect_100_continue_is_answered_before_the_body_is_read() -> None:
    raw = post(b"/echo", b"", b"expect: 100-continue").replace(b"content-length: 0", b"content-length: 5")
    answers = []
    for protocol in (HttpToolsProtocol, HttpProtocol):
        async with serving(protocol) as port:
            data, _ = await exchange(port, raw, then=b"hello")
        answers.append(without_date(data))
    assert answers[0] == answers[1]
    assert answers[1].startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert answers[1].endswith(b"\r\n\r\nhello")


async def test_past_the_concurrency_limit_the_answer_is_503() -> None:
    async with serving(HttpProtocol, limit_concurrency=1) as port:
        data, _ = await exchange(port, post(b"/a"))
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")


async def test_a_client_that_leaves_is_told_to_the_app_as_a_disconnect() -> None:
    disconnected.clear()
    async with serving(HttpProtocol) as port:
        await exchange(port, post(b"/disconnect"), wait_s=0.1)
        await asyncio.wait_for(disconnected.wait(), 2)


async def test_whole_responses_and_frames_written_directly_match_those_sent_as_messages() -> None:
    for path in (b"/a", b"/missing", b"/stream"):
        async with serving(HttpProtocol) as port:
            via_send, _ = await exchange(port, post(path))
        async with serving(HttpProtocol, _direct_app) as port:
            direct, closed = await exchange(port, post(path))
        assert not closed
        if path == b"/stream":
            assert without_date(direct) == without_date(via_send)
            assert direct.endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\na\r\ndata: 22\n\n\r\n0\r\n\r\n")
        else:  # the direct write puts content-length last
            head, body = without_date(direct).split(b"\r\n\r\n")
            sent_head, sent_body = without_date(via_send).split(b"\r\n\r\n")
            assert sorted(head.split(b"\r\n")) == sorted(sent_head.split(b"\r\n"))
            assert body == sent_body == b'{"ok":true}'


async def test_a_direct_write_keeps_the_connection_as_the_client_asked() -> None:
    async with serving(HttpProtocol, _direct_app) as port:
        data, closed = await exchange(port, post(b"/a") + post(b"/missing"))  # pipelined
        assert data.index(b"HTTP/1.1 200 OK") < data.index(b"HTTP/1.1 404 Not Found")
        assert not closed
        data, closed = await exchange(port, post(b"/a", b"", b"connection: close"))
        assert b"\r\nconnection: close\r\n" in data and closed


@pytest.mark.parametrize("path", [b"/bad-value", b"/bad-name"])
async def test_a_header_that_could_split_the_response_is_refused(path: bytes) -> None:
    async with serving(HttpProtocol, _direct_app) as port:
        data, _ = await exchange(port, post(path))
    assert data.startswith(b"HTTP/1.1 500 ")
    assert b"set-cookie" not in data and b"x evil" not in data
    assert data.endswith(b"\r\n\r\nrefused")


async def test_a_frame_is_left_to_send_while_writing_is_paused_or_the_response_is_not_chunked() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        cycle: Cycle = scope["extensions"][DIRECT_WRITES]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
        assert not cycle.write_frame(b"x")  # a content-length response: send writes it
        cycle.protocol.pause_writing()
        assert not cycle.write_frame(b"x")  # send waits for the client to read
        cycle.protocol.resume_writing()
        await send({"type": "http.response.body", "body": b"x"})

    async with serving(HttpProtocol, app) as port:
        data, _ = await exchange(port, post(b"/a"))
    assert without_date(data).endswith(b"content-length: 1\r\n\r\nx")


async def test_a_head_goes_out_with_its_first_body_bytes_or_alone_when_the_iteration_ends() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        if scope["path"] == "/later":
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"{}"})

    config = uvicorn.Config(app, log_level="error", lifespan="off")
    config.load()
    for path, writes in ((b"/now", 1), (b"/later", 2)):
        transport = RecordingTransport()
        protocol = HttpProtocol(config, uvicorn.server.ServerState(), {})
        protocol.connection_made(transport)
        protocol.data_received(b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path)
        await asyncio.sleep(0.1)
        assert len(transport.writes) == writes
        assert b"".join(transport.writes).endswith(b"content-length: 2\r\n\r\n{}")
        protocol.connection_lost(None)


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout_and_a_busy_one_is_not() -> None:
    async with serving(HttpProtocol, timeout_keep_alive=0.3) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(5):  # a request every 0.1 s for 0.5 s: past the timeout, never idle that long
            writer.write(post(b"/a"))
            assert (await reader.readuntil(b'{"ok":true}')).startswith(b"HTTP/1.1 200 OK")
            await asyncio.sleep(0.1)
        assert not reader.at_eof()
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed by the server ...
        assert 0.15 < asyncio.get_running_loop().time() - started < 1.0  # ... once idle 0.3 s
        writer.close()


async def test_a_graceful_stop_lets_the_response_in_progress_finish_then_closes() -> None:
    release = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=HttpProtocol, log_level="error", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"/a"))
    await asyncio.sleep(0.1)
    server.should_exit = True  # the stop begins while the request is served
    await asyncio.sleep(0.2)
    release.set()
    data = await asyncio.wait_for(reader.read(), 2)  # then EOF: the connection is closed after it
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nconnection: close\r\n" in data
    assert data.endswith(b"\r\n\r\nok")
    await task
    writer.close()


async def test_a_served_requests_cycle_is_freed_without_the_garbage_collector() -> None:
    """Nothing the cycle holds leads back to it once its request is over: a loop of references
    (the scope holds the cycle) would wait for a collection, a few kilobytes a request until then."""

    def live_cycles() -> int:
        return sum(type(o) is Cycle for o in gc.get_objects())

    async with serving(HttpProtocol, _app) as port:
        gc.collect()
        gc.disable()
        try:
            before = live_cycles()
            await exchange(port, post(b"/a") + post(b"/stream") + post(b"/a"), wait_s=0.1)
            await asyncio.sleep(0.05)
            assert len(seen) == 3
            seen.clear()
            assert live_cycles() == before
        finally:
            gc.enable()


async def test_the_access_log_has_a_line_per_response_when_it_is_on() -> None:
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    access = logging.getLogger("uvicorn.access")
    async with serving(HttpProtocol, _direct_app, access_log=True, log_level="info") as port:
        access.addHandler(handler)  # after uvicorn configured its loggers, before the connection
        try:
            await exchange(port, post(b"/a") + post(b"/stream"))
        finally:
            access.removeHandler(handler)
    assert len(lines) == 2, lines
    assert '"POST /a HTTP/1.1" 200' in lines[0] and '"POST /stream HTTP/1.1" 200' in lines[1]


def test_the_header_checks_refuse_exactly_the_bytes_uvicorn_refuses() -> None:
    for byte in range(256):
        piece = b"x-a" + bytes([byte])
        for check, pattern in ((check_header_names, HEADER_RE), (check_header_values, HEADER_VALUE_RE)):
            refused = pattern.search(piece) is not None
            if refused:
                with pytest.raises(RuntimeError):
                    check(piece)
            else:
                check(piece)
