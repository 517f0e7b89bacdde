"""The mock served in-process to httpx, with no sockets: the gateway's built-in `mock` provider.

    httpx.AsyncClient(transport=InProcessMockTransport(MockBehaviour()), base_url="http://mock/v1")

It runs the same handlers as the HTTP server and streams SSE frame by frame. It honours the
client's read timeout (latency, hangs and chunk delays raise `httpx.ReadTimeout`) and turns a
dropped stream into `httpx.RemoteProtocolError`, as a real connection would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.replies import MockReply, StreamDropped
from mock_upstream.service import MockRequest, MockUpstream

# Fewer than the server keeps: this transport lives inside a long-running gateway process.
TRANSPORT_RECORD_LIMIT = 1_000


def _read_timeout(request: httpx.Request) -> float | None:
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read")
    return float(value) if value is not None else None


class _FrameStream(httpx.AsyncByteStream):
    """A reply's SSE frames as an httpx response stream."""

    def __init__(self, reply: MockReply, request: httpx.Request) -> None:
        self._frames = reply.stream()
        self._request = request
        self._read_timeout = _read_timeout(request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                async with asyncio.timeout(self._read_timeout):
                    frame = await anext(self._frames)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise httpx.ReadTimeout("mock upstream: read timed out", request=self._request) from exc
            except StreamDropped as exc:
                message = (
                    "peer closed connection without sending complete message body (incomplete chunked read)"
                )
                raise httpx.RemoteProtocolError(message, request=self._request) from exc
            yield frame

    async def aclose(self) -> None:
        await self._frames.aclose()


class InProcessMockTransport(httpx.AsyncBaseTransport):
    """An httpx transport answered by a `MockUpstream`; `upstream` exposes its state to tests."""

    def __init__(
        self, behaviour: MockBehaviour | None = None, record_limit: int = TRANSPORT_RECORD_LIMIT
    ) -> None:
        self.upstream = MockUpstream(behaviour or MockBehaviour(), record_limit=record_limit)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = {name.lower(): value for name, value in request.headers.items()}
        query = request.url.query.decode("latin-1")
        mock_request = MockRequest(request.method, request.url.path, query, headers, body)
        try:
            async with asyncio.timeout(_read_timeout(request)):
                reply = await self.upstream.handle(mock_request)
                if reply.hang:
                    await asyncio.Event().wait()
        except TimeoutError as exc:
            raise httpx.ReadTimeout("mock upstream: read timed out", request=request) from exc
        if reply.frames is None:
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body, request=request)
        return httpx.Response(
            reply.status, headers=reply.headers, stream=_FrameStream(reply, request), request=request
        )
