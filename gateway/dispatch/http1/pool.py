"""The upstream HTTP/1.1 client: keep-alive connections as asyncio protocols, parsed by llhttp.

It exists because httpcore (under httpx) scans its whole connection pool on every request and
response, O(n) in connections, each check a probe of the socket: a request costs more with every
connection a burst left open. This pool takes an idle connection for an origin off a list.

What it does: one pool of idle connections per origin (plain or TLS), reused while the upstream
keeps them alive; at most `max_per_origin` exchanges at once per origin; chunked,
length-delimited and close-delimited bodies; a read timeout per wait and a connect timeout; flow
control (a slow reader pauses the socket). Every failure is raised as a
`gateway.errors.UpstreamError`, so nothing above this module sees a socket error.

What it does not do: HTTP/2, proxies, redirects, cookies, authentication flows, content decoding
(it asks for none), streamed request bodies, `Expect: 100-continue`, or retries (the executor
decides those). The gateway sends one kind of request, a POST with a body it already holds, to a
handful of origins.

This module is the pool and the reply a caller reads; one connection's wire work is
`gateway.dispatch.http1.connection`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncGenerator, Mapping

from gateway.dispatch.http1.connection import Connection, request_head, target_of
from gateway.errors import UpstreamMisconfigured, UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable


class Reply:
    """An upstream's answer: status and headers at once, the body as it arrives."""

    __slots__ = ("_conn", "_headers", "_raw_headers", "_read_timeout", "_released", "_slots", "status")

    def __init__(self, conn: Connection, read_timeout: float, slots: asyncio.Semaphore) -> None:
        self._conn, self._read_timeout, self._released, self._slots = conn, read_timeout, False, slots
        self.status = conn.status
        self._raw_headers = conn.raw_headers
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Decoded when asked for (an error's Retry-After): a success never reads them."""
        if self._headers is None:
            self._headers = {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self._raw_headers
            }
        return self._headers

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body, piece by piece as it arrives; the connection is released at its end."""
        while (chunk := await self._conn.next_chunk(self._read_timeout)) is not None:
            yield chunk
        self._release()

    async def read(self, limit: int) -> bytes:
        """The whole body, at most `limit` bytes."""
        parts, size = [], 0
        while (chunk := await self._conn.next_chunk(self._read_timeout)) is not None:
            size += len(chunk)
            if size > limit:
                raise UpstreamTooLarge
            parts.append(chunk)
        self._release()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.complete and conn.keep_alive and not conn.closed:
            conn.pool.put_back(conn)
        else:
            conn.close()
        self._slots.release()

    async def aclose(self) -> None:
        """Give the connection back when the body was read whole; otherwise it cannot be reused."""
        self._release()


class UpstreamPool:
    """Idle keep-alive connections by origin; a new connection when none is idle.

    At most `max_per_origin` exchanges run at once per origin (a burst must not exhaust the
    process's file descriptors or the upstream's accept queue); beyond that a request waits for
    one to end, up to its connect timeout.
    """

    def __init__(
        self, max_per_origin: int = 4096, max_idle_per_origin: int = 1024, keepalive_s: float = 4.0
    ) -> None:
        # `keepalive_s` under uvicorn's 5 s idle close (vLLM's, SGLang's and most Python servers'):
        # a connection idle that long is dropped here rather than reused at the moment the server
        # closes it, which would fail a request that never reached it.
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._slots: dict[tuple[str, str, int], asyncio.Semaphore] = {}
        self._max_per_origin = max_per_origin
        self._max_idle = max_idle_per_origin
        self._keepalive_s = keepalive_s
        self._ssl: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> Reply:
        """Send one request and wait for the response head; read the body from the `Reply`."""
        try:
            target = target_of(url)
        except ValueError as exc:
            raise UpstreamMisconfigured(f"The upstream URL is invalid ({exc})") from exc
        head = request_head(method, target, headers, len(body))
        slots = await self._slot(target.origin, connect_timeout)
        try:
            conn = self._idle_connection(target.origin) or await self._connect(target.origin, connect_timeout)
        except BaseException:
            slots.release()
            raise
        conn.send(head, body)
        try:
            await conn.response_head(read_timeout)
        except BaseException:
            conn.close()
            slots.release()
            raise
        return Reply(conn, read_timeout, slots)

    async def _slot(self, origin: tuple[str, str, int], wait_s: float) -> asyncio.Semaphore:
        slots = self._slots.get(origin)
        if slots is None:
            slots = self._slots[origin] = asyncio.Semaphore(self._max_per_origin)
        if not slots.locked():  # a free slot is taken at once: no timer to arm
            await slots.acquire()
            return slots
        try:
            async with asyncio.timeout(wait_s):
                await slots.acquire()
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"All {self._max_per_origin} connections to the upstream stayed busy"
            ) from exc
        return slots

    def _idle_connection(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_s:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: tuple[str, str, int], wait_s: float) -> Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(wait_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(self, origin, loop),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls else None,
                )
        except TimeoutError as exc:
            raise UpstreamTimeout("The upstream did not accept the connection in time") from exc
        except OSError as exc:  # ssl.SSLError included
            raise UpstreamUnavailable("The upstream refused or dropped the connection") from exc
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            import certifi  # httpx's own CA bundle: the same trust as before, on every platform

            self._ssl = ssl.create_default_context(cafile=certifi.where())
        return self._ssl

    def put_back(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
