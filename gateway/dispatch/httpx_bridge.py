"""Any httpx transport behind the executor's upstream interface: the in-process `mock` provider.

Network upstreams go through `gateway.dispatch.http1.pool`; this bridge lets an httpx transport (the
in-process mock, or `httpx.MockTransport` at a test seam) stand in for it, with httpx's exceptions
mapped to the gateway's own at this boundary.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import cast

import httpx

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable


class HttpxReply:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = {name.lower(): value for name, value in response.headers.items()}

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        # httpx types `aiter_bytes()` as an iterator; it is an async generator, closed here.
        body = cast(AsyncGenerator[bytes, None], self._response.aiter_bytes())
        with map_httpx_errors():
            async with contextlib.aclosing(body) as chunks:
                async for chunk in chunks:
                    yield chunk

    async def read(self, limit: int) -> bytes:
        parts, size = [], 0
        async with contextlib.aclosing(self.chunks()) as chunks:
            async for chunk in chunks:
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


@contextlib.contextmanager
def map_httpx_errors() -> Iterator[None]:
    """Translate httpx's exceptions into the gateway's own, so nothing above knows httpx."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout("The upstream did not answer in time") from exc
    except httpx.ConnectError as exc:
        raise UpstreamUnavailable("The upstream refused or dropped the connection") from exc
    except httpx.RemoteProtocolError as exc:
        raise UpstreamError("The upstream closed the connection mid-response") from exc
    except httpx.HTTPError as exc:
        raise UpstreamError(f"The upstream connection failed ({type(exc).__name__})") from exc
