"""The ASGI front's relay of an SSE stream to the client, stopped as soon as the client leaves.

Kept apart from `proxy_asgi` (compiled in a compiled build): the relay closes the stream while it
handles a cancellation or a failed send, and compiled code must not suspend inside an exception
handler (setup.py, HOT_PATH).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from litestar.types import Receive, Send

from gateway.http_cycle import Cycle

_SSE = (b"content-type", b"text/event-stream; charset=utf-8")


async def relay_sse(
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    frames: AsyncGenerator[bytes, None],
    cycle: Cycle | None = None,
) -> None:
    """Send an SSE stream frame by frame; stop it as soon as the client leaves.

    A task waits on `receive` for `http.disconnect` and cancels the relay if the client goes
    before the stream ends; the relay's own clean-up (`ProxyService.relay`) then closes the
    upstream and meters what was sent. One helper task per stream, where Litestar's streaming
    response runs an anyio task group (about four times the CPU per stream, docs/performance.md).
    With the request's `cycle` (`gateway.http_protocol.Cycle`), frames are written without ASGI messages.
    """
    encoded = [_SSE] + [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": 200, "headers": encoded})
    relaying = asyncio.current_task()
    assert relaying is not None
    watcher = asyncio.ensure_future(_client_leaves(receive))
    watcher.add_done_callback(lambda w: None if w.cancelled() or w.exception() else relaying.cancel())
    try:
        async for frame in frames:
            if cycle is None or not cycle.write_frame(frame):
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        watcher.cancel()  # the stream is whole: a disconnect from now on changes nothing
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if watcher.cancelled() or not watcher.done():
            raise  # cancelled from outside (the server stopping), not by the client leaving
        relaying.uncancel()  # the client left: the relay has cleaned up and metered; done
    finally:
        watcher.cancel()
        await frames.aclose()  # a failed send leaves the relay suspended: close it, so it meters


async def _client_leaves(receive: Receive) -> None:
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            return
