"""Any httpx transport behind the executor's upstream interface: the in-process `mock` provider.

Network upstreams go through `gateway.dispatch.http1`; this bridge lets an httpx transport (the
in-process mock, or `httpx.MockTransport` at a test seam) stand in for it, with httpx's exceptions
mapped to the gateway's own at this boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable


class HttpxReply:
    __slots__ = ("_chunks", "_response", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] | None = None
        self.status = response.status_code
        self.headers = {name.lower(): value for name, value in response.headers.items()}

    async def next_chunk(self) -> bytes | None:
        if self._chunks is None:
            self._chunks = self._response.aiter_bytes()
        with map_httpx_errors():
            return await anext(self._chunks, None)

    async def read(self, limit: int) -> bytes:
        parts, size = [], 0
        while (chunk := await self.next_chunk()) is not None:
            size += len(chunk)
            if size > limit:
                raise UpstreamTooLarge
            parts.append(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> HttpxReply:
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout).as_dict()
        request = httpx.Request(method, url, headers=headers, content=body, extensions={"timeout": timeout})
        with map_httpx_errors():
            return HttpxReply(await self.transport.handle_async_request(request))

    async def aclose(self) -> None:
        await self.transport.aclose()


class map_httpx_errors:
    """Translate httpx's exceptions into the gateway's own, so nothing above knows httpx."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or not isinstance(exc, httpx.HTTPError):
            return
        if isinstance(exc, httpx.TimeoutException):
            raise UpstreamTimeout("The upstream did not answer in time") from exc
        if isinstance(exc, httpx.ConnectError):
            raise UpstreamUnavailable("The upstream refused or dropped the connection") from exc
        if isinstance(exc, httpx.RemoteProtocolError):
            raise UpstreamError("The upstream closed the connection mid-response") from exc
        raise UpstreamError(f"The upstream connection failed ({type(exc).__name__})") from exc
