"""One HTTP/1.1 connection to an upstream: the request head it writes, the response llhttp parses.

`Connection` is an asyncio protocol carrying one exchange at a time: it writes a request's head and
body in one go, parses the response with httptools (llhttp), queues body chunks as they arrive,
pauses the socket when a slow reader lets them pile up, and turns every failure into a
`gateway.errors.UpstreamError`. The pool that reuses connections is `gateway.dispatch.http1.pool`.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from gateway.errors import UpstreamError, UpstreamMisconfigured, UpstreamTimeout, UpstreamUnavailable


class ConnectionPool(Protocol):
    """Where a connection goes back once its exchange is over (`http1.UpstreamPool`)."""

    def put_back(self, conn: Connection) -> None: ...


HIGH_WATER = 256 * 1024  # buffered body bytes at which the socket stops being read
MAX_HEAD = 64 * 1024  # response status line and headers together


@dataclass(frozen=True, slots=True)
class Target:
    """Where one URL goes: the pool it shares (origin) and the request line's target."""

    origin: tuple[str, str, int]  # scheme, host, port
    host_header: bytes
    path: bytes


@functools.lru_cache(maxsize=4096)
def target_of(url: str) -> Target:
    """Upstream URLs repeat (a few per deployment): split each once, not once per request."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target((parts.scheme, parts.hostname, port), parts.netloc.encode("idna"), path.encode())


def request_head(method: str, target: Target, headers: Mapping[str, str], length: int) -> bytes:
    lines = [f"{method} ".encode() + target.path + b" HTTP/1.1", b"host: " + target.host_header]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise UpstreamMisconfigured(f"The upstream request header {name!r} contains a line break")
        lines.append(f"{name}: {value}".encode("latin-1"))
    lines.append(b"content-length: %d" % length)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


class Connection(asyncio.Protocol):
    """One socket to an upstream, carrying one exchange at a time."""

    def __init__(
        self, pool: ConnectionPool, origin: tuple[str, str, int], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.pool, self.origin = pool, origin
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self.idle_since = 0.0
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self._informational = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: UpstreamError | None = None

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"The upstream sent an invalid HTTP response ({exc})"))
        except UpstreamError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and not self._delimited():
            self.complete = True  # a body delimited by the end of the connection has ended
        elif not self.complete and self._error is None:
            if self.headers_done:
                self._error = UpstreamError("The upstream closed the connection mid-response")
            else:
                self._error = UpstreamUnavailable("The upstream closed the connection before answering")
        self._wake()

    # --- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes | None) -> None:
        self._head_size += len(name) + len(value or b"")
        if self._head_size > MAX_HEAD:
            raise UpstreamError("The upstream response headers exceed the gateway's size limit")
        self.raw_headers.append((name, value or b""))  # as sent: lower-cased only when read

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._informational = True
            self.raw_headers = []
            return
        self.status = status
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()

    def _delimited(self) -> bool:
        """The body has a length or is chunked: the connection's end before the body's is an error."""
        return any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.raw_headers)

    # --- the exchange -----------------------------------------------------------------------

    def _fail(self, error: UpstreamError) -> None:
        self._error = error
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, wait_s: float) -> None:
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(wait_s, self._time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(UpstreamTimeout("The upstream did not answer in time"))

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.transport.writelines((head, body))

    async def response_head(self, wait_s: float) -> None:
        while not self.headers_done:
            if self._error is not None:
                raise self._error
            await self._wait(wait_s)
        if self._error is not None and not self._chunks:
            raise self._error

    async def next_chunk(self, wait_s: float) -> bytes | None:
        """The next piece of the body as it arrived, or None once the body is complete."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.complete:
                return None
            await self._wait(wait_s)
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
