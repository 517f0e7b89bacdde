"""The frame loop of an SSE response, in the compiled build: what a stream costs per frame.

`gateway.api.sse_relay` sets the response up and cleans it up (it awaits while it handles a
cancellation, which compiled code must not); the loop between is here.
"""

from __future__ import annotations

from typing import Protocol

from litestar.types import Send

from gateway.http_cycle import Cycle


class FrameSource(Protocol):
    """What is relayed (`gateway.proxy.relay.StreamRelay`): frames until None, then one `close()`."""

    async def next_frame(self) -> bytes | None: ...

    async def close(self) -> None: ...


async def pump(frames: FrameSource, send: Send, cycle: Cycle | None) -> None:
    """Every frame to the client as it comes; written directly when the request's `cycle` allows."""
    while True:
        frame = await frames.next_frame()
        if frame is None:
            return
        if cycle is None or not cycle.write_frame(frame):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
