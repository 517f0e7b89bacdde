"""The ASGI front's relay of an SSE stream to the client, stopped as soon as the client leaves or
stops taking what is sent.

A client that keeps its connection open and never reads would hold the upstream stream, and the
capacity permit that goes with it, for as long as it likes: every send has a write deadline
(`limits.stream_write_timeout_s`). Under uvicorn a send waits only while the connection's write
buffer is above its high-water mark (its flow control's `drain`), that is while the client is not
taking the bytes already sent, so a send that does not complete in time is a client that made no
progress for that long. Cancelling that wait leaves uvicorn's request cycle as it was (the message
is not written). ASGI has no message that drops a connection, and uvicorn closes the transport of
a response left unfinished gracefully, which waits for the client to take the bytes buffered for it
(never, from a stalled client): the relay aborts the transport itself, reached through the request
cycle whose `receive` it was given (`_drop_connection`); under a server without one, the server's
own close is all there is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from litestar.types import Receive, Send

SSE = (b"content-type", b"text/event-stream; charset=utf-8")


class FrameSource(Protocol):
    """What is relayed (`gateway.proxy.relay.StreamRelay`): its frames, then one `close()`."""

    def frames(self) -> AsyncGenerator[bytes, None]: ...

    def client_stalled(self, timeout_s: float) -> None:
        """The client took nothing for `timeout_s`; called before `close()`."""
        ...

    async def close(self) -> None: ...


class ClientStalled(Exception):
    """A send the client did not take within the write deadline."""


async def relay_sse(
    receive: Receive,
    send: Send,
    headers: list[tuple[bytes, bytes]],
    source: FrameSource,
    write_timeout_s: float,
) -> None:
    """Send an SSE stream frame by frame; stop it as soon as the client leaves or stalls.

    `headers`: encoded, the content type (`SSE`) first. A task waits on `receive` for
    `http.disconnect` and cancels the relay if the client goes before the stream ends; the frames
    are then closed, and `source.close()` closes the upstream and meters what was sent, once the
    watcher can no longer cancel anything. A send that waits `write_timeout_s` for the client ends
    the relay the same way, and drops the connection. A whole stream is closed (and metered)
    before the end of the body goes out. One watcher task per stream, where Litestar's streaming
    response runs an anyio task group per response (docs/performance.md).
    """
    relaying = asyncio.current_task()
    assert relaying is not None
    frames = source.frames()
    watcher: asyncio.Task[None] | None = None
    whole = stalled = False
    try:
        await _send_in_time(
            send, {"type": "http.response.start", "status": 200, "headers": headers}, write_timeout_s
        )
        watcher = asyncio.create_task(_cancel_when_client_leaves(receive, relaying), name="sse-client-watch")
        async for frame in frames:
            await _send_in_time(
                send, {"type": "http.response.body", "body": frame, "more_body": True}, write_timeout_s
            )
        whole = True
    except ClientStalled:
        stalled = True
        source.client_stalled(write_timeout_s)
    except asyncio.CancelledError:
        if not _client_left(watcher):
            raise  # cancelled from outside (the server stopping), not by the client leaving
        relaying.uncancel()  # the client left: the relay is cleaned up and metered below; done
    finally:
        if watcher is not None:
            watcher.cancel()  # a disconnect from now on changes nothing
        if stalled:
            await _drop_connection(receive)
        try:
            await frames.aclose()
        finally:
            await source.close()  # however it ended (a failed send, the client leaving)
    if whole:
        try:
            await _send_in_time(
                send, {"type": "http.response.body", "body": b"", "more_body": False}, write_timeout_s
            )
        except ClientStalled:  # the stream is whole and metered; only its last bytes are not taken
            await _drop_connection(receive)


async def _send_in_time(send: Send, message: Any, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await send(message)
    except TimeoutError:
        raise ClientStalled from None


async def _drop_connection(receive: Receive) -> None:
    """Abort the client's connection, the bytes it did not take dropped: uvicorn's transport, found
    on the request cycle `receive` belongs to. The connection then no longer counts against the
    server's `limit_concurrency` either. The loop reports the connection lost on its next turn,
    which marks the cycle disconnected: waited for, so that uvicorn does not log the unfinished
    response as the app's fault."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()
        await asyncio.sleep(0)


async def _cancel_when_client_leaves(receive: Receive, relaying: asyncio.Task[Any]) -> None:
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            relaying.cancel()
            return


def _client_left(watcher: asyncio.Task[None] | None) -> bool:
    """The watcher saw the client leave (and so cancelled the relay)."""
    return watcher is not None and watcher.done() and not watcher.cancelled() and watcher.exception() is None
