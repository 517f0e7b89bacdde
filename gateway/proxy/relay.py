"""The relay of one SSE stream to the client: its frames, then one usage record however it ended.

`frames()` is what the front sends, an upstream error after the first byte ending it in-band;
`close()` closes the upstream and meters. They are apart because the front stops `frames()` by
cancelling it when the client leaves, and the metering must not be where that cancellation lands:
the front closes the relay once the frames are over (`gateway.api.sse_relay`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

import structlog

from gateway.dispatch.stream import OpenStream
from gateway.errors import GatewayError

log = structlog.get_logger("gateway.proxy")

# Records the usage of a stream that has ended, given the status and error code it ended with.
StreamMeter = Callable[[OpenStream, int, str | None], Awaitable[None]]


@dataclass(slots=True)
class StreamRelay:
    """The frames of one stream for the client, and its close; `close()` runs once."""

    request_id: str
    stream: OpenStream
    meter: StreamMeter
    status: int = 200
    error_code: str | None = None
    closed: bool = False

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The frames to send, several joined when one upstream read held them."""
        try:
            async with contextlib.aclosing(self.stream.frames()) as frames:
                async for frame in frames:
                    yield frame
        except GatewayError as exc:
            self.status, self.error_code = exc.status, exc.code
            log.warning("stream_failed", request_id=self.request_id, code=exc.code)
            yield b"data: " + exc.to_json() + b"\n\n"

    async def close(self) -> None:
        """Close the upstream and record the usage, once, however the relay ended (a client that
        walks away included). Both steps are bounded already: the upstream connection is given
        back without a wait, and the usage record goes to Redis within one round trip's timeout
        or else to the spool."""
        if self.closed:
            return
        self.closed = True
        try:
            await self.stream.close()
        finally:
            await self.meter(self.stream, self.status, self.error_code)
