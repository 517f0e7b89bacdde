"""The relay's write deadline under uvicorn itself (httptools, uvloop, real sockets): a client that
never reads loses its connection once a send waits past the deadline, and uvicorn goes on serving
without reporting the unfinished response as the app's fault."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.api.front.sse_relay import SSE, relay_sse

WRITE_TIMEOUT_S = 0.3
FRAME = b"data: " + b"x" * 65_536 + b"\n\n"


class EndlessUpstream:
    """A stream that never ends, as the relay sees it (`gateway.proxy.relay.StreamRelay`)."""

    def __init__(self) -> None:
        self.frames_sent = 0
        self.stalled_after_s: float | None = None
        self.closed = threading.Event()

    async def frames(self) -> AsyncGenerator[bytes, None]:
        while True:
            self.frames_sent += 1
            yield FRAME

    def client_stalled(self, timeout_s: float) -> None:
        self.stalled_after_s = timeout_s

    async def close(self) -> None:
        self.closed.set()


def relaying_app(upstream: EndlessUpstream) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/stream":
            await relay_sse(receive, send, [SSE], upstream, WRITE_TIMEOUT_S)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


@pytest.fixture
def upstream() -> EndlessUpstream:
    return EndlessUpstream()


@pytest.fixture
def server(upstream: EndlessUpstream) -> Iterator[uvicorn.Server]:
    """uvicorn as `gateway serve` runs it (httptools, uvloop), in a thread."""
    config = uvicorn.Config(
        relaying_app(upstream), http="httptools", loop="uvloop", lifespan="off", log_config=None
    )
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    server.config.host, server.config.port = sock.getsockname()
    yield server
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_a_client_that_never_reads_loses_its_connection_and_uvicorn_goes_on(
    server: uvicorn.Server, upstream: EndlessUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    address = (server.config.host, server.config.port)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(address)
    try:
        client.sendall(b"GET /stream HTTP/1.1\r\nhost: gateway\r\n\r\n")  # and never reads

        assert upstream.closed.wait(10), "the relay went on waiting for a client that never reads"
        assert upstream.stalled_after_s == WRITE_TIMEOUT_S
        deadline = time.monotonic() + 5  # bounds a broken test: the connection goes at once
        while server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server.server_state.connections  # closed, not left open for the client to drain
    finally:
        client.close()

    host, port = address
    assert httpx.get(f"http://{host}:{port}/ok", timeout=5).text == "ok"  # uvicorn serves on
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
