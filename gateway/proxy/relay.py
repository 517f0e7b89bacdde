"""The relay of one SSE stream to the client, metered once however it ends.

A class with coroutine methods rather than an async generator, so that a compiled build compiles
it (mypyc does not compile async generators): `next_frame()` until None, then `close()`, which the
front (`gateway.api.sse_relay`) calls whatever happened, a client leaving included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.dispatch.stream import OpenStream
    from gateway.proxy.service import ProxyContext, ProxyService

log = structlog.get_logger("gateway.proxy")


class StreamRelay:
    """The frames of one stream for the client; an error after the first byte ends it in-band."""

    def __init__(self, service: ProxyService, ctx: ProxyContext, stream: OpenStream) -> None:
        self._service = service
        self._ctx = ctx
        self._stream = stream
        self._status = 200
        self._error_code: str | None = None
        self._ended = False
        self._closed = False

    async def next_frame(self) -> bytes | None:
        """The next frames to send (several joined when one upstream read held them); None at the end."""
        if self._ended:
            return None
        failure: GatewayError | None = None
        try:
            frames = await self._stream.next_frames()
        except GatewayError as exc:
            failure = exc
        if failure is not None:
            self._ended = True
            self._status, self._error_code = failure.status, failure.code
            log.warning("stream_failed", request_id=self._ctx.request_id, code=failure.code)
            return b"data: " + failure.to_json() + b"\n\n"
        if frames is None:
            self._ended = True
        return frames

    async def close(self) -> None:
        """Close the upstream and record the usage, once, however the relay ended (a client that
        walks away included: the front calls this after the cancellation it caused). Both steps
        are bounded already: the upstream connection is given back without a wait, and the usage
        record goes to Redis within one round trip's timeout or else to the spool."""
        if self._closed:
            return
        self._closed = True
        await self._stream.close()
        await self._service.meter_stream(self._ctx, self._stream, self._status, self._error_code)
