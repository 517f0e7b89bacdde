"""The ASGI front's relay of an SSE stream to the client, stopped as soon as the client leaves.

Kept apart from `proxy_asgi` (compiled in a compiled build): the relay closes the stream while it
handles a cancellation or a failed send, and compiled code must not suspend inside an exception
handler (setup.py, HOT_PATH). The loop over the frames is compiled (`gateway.api.sse_pump`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.types import Receive, Send

from gateway.api.sse_pump import FrameSource, pump
from gateway.http_cycle import Cycle
from gateway.loop_tasks import start_task

SSE = (b"content-type", b"text/event-stream; charset=utf-8")


async def relay_sse(
    receive: Receive,
    send: Send,
    headers: list[tuple[bytes, bytes]],
    frames: FrameSource,
    cycle: Cycle | None = None,
) -> None:
    """Send an SSE stream frame by frame; stop it as soon as the client leaves.

    `headers`: encoded, the content type (`SSE`) first. A task waits on `receive` for
    `http.disconnect` and cancels the relay if the client goes before the stream ends;
    `frames.close()` then closes the upstream and meters what was sent. A whole stream is closed
    (and metered) before the end of the body goes out. One helper task per stream, where
    Litestar's streaming response runs an anyio task group (about four times the CPU per stream,
    docs/performance.md). With the request's `cycle` (`gateway.http_protocol.Cycle`), frames are
    written without ASGI messages.
    """
    relaying = asyncio.current_task()
    assert relaying is not None
    watcher: asyncio.Future[None] | None = None
    whole = False
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        watcher = start_task(relaying.get_loop(), _client_leaves(receive), "sse-client-watch")
        watcher.add_done_callback(lambda w: None if w.cancelled() or w.exception() else relaying.cancel())
        await pump(frames, send, cycle)
        whole = True
    except asyncio.CancelledError:
        if watcher is None or watcher.cancelled() or not watcher.done():
            raise  # cancelled from outside (the server stopping), not by the client leaving
        relaying.uncancel()  # the client left: the relay is cleaned up and metered below; done
    finally:
        if watcher is not None:
            watcher.cancel()  # a disconnect from now on changes nothing
        await frames.close()  # however it ended (a failed send, the client leaving)
    if whole:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _client_leaves(receive: Receive) -> None:
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            return
