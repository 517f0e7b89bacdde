"""The ASGI front's relay of an SSE stream to the client, stopped as soon as the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from litestar.types import Receive, Send

SSE = (b"content-type", b"text/event-stream; charset=utf-8")


class FrameSource(Protocol):
    """What is relayed (`gateway.proxy.relay.StreamRelay`): its frames, then one `close()`."""

    def frames(self) -> AsyncGenerator[bytes, None]: ...

    async def close(self) -> None: ...


async def relay_sse(
    receive: Receive, send: Send, headers: list[tuple[bytes, bytes]], source: FrameSource
) -> None:
    """Send an SSE stream frame by frame; stop it as soon as the client leaves.

    `headers`: encoded, the content type (`SSE`) first. A task waits on `receive` for
    `http.disconnect` and cancels the relay if the client goes before the stream ends; the frames
    are then closed, and `source.close()` closes the upstream and meters what was sent, once the
    watcher can no longer cancel anything. A whole stream is closed (and metered) before the end of
    the body goes out. One watcher task per stream, where Litestar's streaming response runs an
    anyio task group per response (docs/performance.md).
    """
    relaying = asyncio.current_task()
    assert relaying is not None
    frames = source.frames()
    watcher: asyncio.Task[None] | None = None
    whole = False
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        watcher = asyncio.create_task(_cancel_when_client_leaves(receive, relaying), name="sse-client-watch")
        async for frame in frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        whole = True
    except asyncio.CancelledError:
        if not _client_left(watcher):
            raise  # cancelled from outside (the server stopping), not by the client leaving
        relaying.uncancel()  # the client left: the relay is cleaned up and metered below; done
    finally:
        if watcher is not None:
            watcher.cancel()  # a disconnect from now on changes nothing
        try:
            await frames.aclose()
        finally:
            await source.close()  # however it ended (a failed send, the client leaving)
    if whole:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_when_client_leaves(receive: Receive, relaying: asyncio.Task[Any]) -> None:
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            relaying.cancel()
            return


def _client_left(watcher: asyncio.Task[None] | None) -> bool:
    """The watcher saw the client leave (and so cancelled the relay)."""
    return watcher is not None and watcher.done() and not watcher.cancelled() and watcher.exception() is None
