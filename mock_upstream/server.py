"""Serving the mock over HTTP: a raw ASGI app (no framework: it streams with the least overhead,
which matters in benchmarks) and `run_mock_upstream`, which runs it under uvicorn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.replies import MockReply, StreamDropped
from mock_upstream.service import MockRequest, MockUpstream

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_reply(reply: MockReply, send: Send) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    if reply.frames is None:
        await send({"type": "http.response.body", "body": reply.body, "more_body": False})
        return
    try:
        async for frame in reply.stream():
            await send({"type": "http.response.body", "body": frame, "more_body": True})
    except StreamDropped:
        return  # an incomplete response: the server closes the connection mid-stream
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class MockUpstreamApp:
    """The ASGI app; `upstream` holds its state (behaviour, record, prompt cache)."""

    def __init__(self, upstream: MockUpstream) -> None:
        self.upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        query = scope.get("query_string", b"").decode("latin-1")
        request = MockRequest(scope["method"], scope["path"], query, _headers(scope), body)
        reply = await self.upstream.handle(request)
        if reply.hang:
            await _wait_for_disconnect(receive)
            return
        await _send_reply(reply, send)


def create_mock_app(behaviour: MockBehaviour) -> MockUpstreamApp:
    return MockUpstreamApp(MockUpstream(behaviour))


def run_mock_upstream(host: str, port: int, behaviour: MockBehaviour) -> None:
    """Serve the mock until interrupted (uvloop and httptools where installed, no access log)."""
    uvicorn.run(
        create_mock_app(behaviour),
        host=host,
        port=port,
        loop="auto",  # uvloop when installed
        http="auto",  # httptools when installed
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )


__all__ = ["MockUpstreamApp", "create_mock_app", "run_mock_upstream"]
