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
from typing import Any

from litestar.types import Receive, Send

from gateway.proxy.relay import FrameSource

SSE = (b"content-type", b"text/event-stream; charset=utf-8")
TIMER_SLACK_S = 0.001  # uvloop's timers count whole milliseconds: one may fire that much early


class WriteDeadline:
    """Cancels the relaying task once one send has waited `timeout_s` for the client.

    One timer per stream, re-armed only when it fires; a send only notes when it began. (An
    `asyncio.timeout` around each send would arm and cancel a timer per frame, which costs many
    times what the send itself does.) The task can be waiting with a send noted only inside that
    send, so that is where the cancellation lands."""

    def __init__(self, send: Send, timeout_s: float) -> None:
        relaying = asyncio.current_task()
        assert relaying is not None
        self.timeout_s = timeout_s
        self.expired = False  # it cancelled the relay
        self._send, self._relaying = send, relaying
        self._loop = asyncio.get_running_loop()
        self._sending_since: float | None = None
        self._timer = self._loop.call_later(timeout_s, self._check)

    async def send(self, message: Any) -> None:
        self._sending_since = self._loop.time()
        try:
            await self._send(message)
        finally:
            self._sending_since = None

    def stop(self) -> None:
        self._timer.cancel()

    def _check(self) -> None:
        since, now = self._sending_since, self._loop.time()
        if since is not None and now - since >= self.timeout_s - TIMER_SLACK_S:
            self.expired = True
            self._relaying.cancel()
            return
        self._timer = self._loop.call_at((now if since is None else since) + self.timeout_s, self._check)


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
    the relay the same way (`WriteDeadline`), and drops the connection. A whole stream is closed
    (and metered) before the end of the body goes out. One watcher task per stream, where
    Litestar's streaming response runs an anyio task group per response (docs/performance.md).
    """
    deadline = WriteDeadline(send, write_timeout_s)
    try:
        if await _relay_frames(receive, headers, source, deadline):
            await _end_body(receive, deadline)
    finally:
        deadline.stop()


async def _relay_frames(
    receive: Receive, headers: list[tuple[bytes, bytes]], source: FrameSource, deadline: WriteDeadline
) -> bool:
    """The head and every frame, then the source closed however that ended; whether the whole
    stream went out."""
    relaying = asyncio.current_task()
    assert relaying is not None
    frames = source.frames()
    watcher: asyncio.Task[None] | None = None
    try:
        await deadline.send({"type": "http.response.start", "status": 200, "headers": headers})
        watcher = asyncio.create_task(_cancel_when_client_leaves(receive, relaying), name="sse-client-watch")
        async for frame in frames:
            await deadline.send({"type": "http.response.body", "body": frame, "more_body": True})
        return True
    except asyncio.CancelledError:
        if not _cancelled_by_us(relaying, deadline, watcher):
            raise  # cancelled from outside (the server stopping), not by the client leaving or stalling
        if deadline.expired:
            source.client_stalled(deadline.timeout_s)
        return False
    finally:
        if watcher is not None:
            watcher.cancel()  # a disconnect from now on changes nothing
        if deadline.expired:
            await _drop_connection(receive)
        try:
            await frames.aclose()
        finally:
            await source.close()  # however it ended (a failed send, the client leaving)


async def _end_body(receive: Receive, deadline: WriteDeadline) -> None:
    """The end of a whole stream's body (the stream is closed and metered already)."""
    try:
        await deadline.send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        relaying = asyncio.current_task()
        if relaying is None or not deadline.expired:
            raise
        relaying.uncancel()  # the client did not take the stream's last bytes: it loses them
        await _drop_connection(receive)


def _cancelled_by_us(
    relaying: asyncio.Task[Any], deadline: WriteDeadline, watcher: asyncio.Task[None] | None
) -> bool:
    """Whether the relay's own watchers cancelled it (the client left, or stalled past the
    deadline); if so the cancellations are taken back, for the relay ends normally."""
    ours = int(deadline.expired) + int(_client_left(watcher))
    for _ in range(ours):
        relaying.uncancel()
    return ours > 0


async def _drop_connection(receive: Receive) -> None:
    """Close the client's connection at once, what the process still buffered for it dropped (the
    kernel sends what it holds, then ends the connection): uvicorn's transport aborted, found on the
    request cycle `receive` belongs to. The connection then no longer counts against the server's
    `limit_concurrency` either. The loop reports the connection lost on its next turn,
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
