"""The relay of one SSE stream to the client, metered once however it ends.

An async generator, kept apart from `ProxyService` (which a compiled build compiles with mypyc,
and mypyc does not compile async generators).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio
import structlog

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.dispatch.stream import OpenStream
    from gateway.proxy.service import ProxyContext, ProxyService

log = structlog.get_logger("gateway.proxy")
METER_GRACE_S = 5.0  # how long a cancelled stream may take to close upstream and record its usage


async def relay(service: ProxyService, ctx: ProxyContext, stream: OpenStream) -> AsyncGenerator[bytes, None]:
    frames = stream.frames()
    status, error_code = 200, None
    try:
        async for frame in frames:
            yield frame
    except GatewayError as exc:
        status, error_code = exc.status, exc.code
        log.warning("stream_failed", request_id=ctx.request_id, code=exc.code)
        yield b"data: " + exc.to_json() + b"\n\n"
    finally:
        # A client that walks away cancels this task; the clean-up and the record must still happen.
        with anyio.move_on_after(METER_GRACE_S, shield=True):
            await frames.aclose()
            await service.meter_stream(ctx, stream, status, error_code)
