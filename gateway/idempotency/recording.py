"""A keyed stream's frames, recorded as they go to the client, and run to its end even when the
client leaves: its retry then gets the whole stream from the store.

The upstream is read by a task of its own (a client that leaves cancels only its own relay, not
that read) and handed to the client through a queue of two chunks, so a slow client still slows
the upstream down as an unkeyed stream's does. Once the client has gone, the task reads on to the
end, within the lease, and then closes (meters) the stream and stores it. A recording past the cap
is dropped; with no client left to read it either, the upstream is closed at once, as an unkeyed
stream's would be.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable

from gateway.proxy.relay import StreamRelay

QUEUED_CHUNKS = 2

# Called once the stream has ended and been metered: its chunks when it is to be kept (whole,
# ended by the upstream without error, within the cap), else None.
StreamEnd = Callable[[list[bytes] | None], Awaitable[None]]


class RecordedStream:
    """The `FrameSource` (gateway.proxy.relay) the front relays for a keyed stream."""

    def __init__(self, relay: StreamRelay, max_bytes: int, lease_s: float, on_end: StreamEnd) -> None:
        self._relay = relay
        self._max_bytes = max_bytes
        self._lease_s = lease_s
        self._on_end = on_end
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUED_CHUNKS)  # None: the end
        self._attached = True  # a client is reading
        self._kept: list[bytes] | None = []
        self._size = 0
        self._deadline: asyncio.Timeout | None = None
        self.task = asyncio.create_task(self._read(), name="idempotent-stream")

    async def frames(self) -> AsyncGenerator[bytes, None]:
        while (chunk := await self._queue.get()) is not None:
            yield chunk

    def client_stalled(self, timeout_s: float) -> None:
        """The front drops a client that stopped reading; the upstream is read on all the same."""
        self.detach()

    async def close(self) -> None:
        self.detach()

    def detach(self) -> None:
        """No client reads any more: the read goes on to the end, for at most the lease from now."""
        if not self._attached:
            return
        self._attached = False
        while not self._queue.empty():  # a read waiting for room goes on
            self._queue.get_nowait()
        if self._deadline is not None:
            self._deadline.reschedule(asyncio.get_running_loop().time() + self._lease_s)

    async def _read(self) -> None:
        complete = False
        frames = self._relay.frames()
        try:
            async with asyncio.timeout(None) as self._deadline:
                if not self._attached:  # detached before this task began
                    self._deadline.reschedule(asyncio.get_running_loop().time() + self._lease_s)
                async for chunk in frames:
                    self._record(chunk)
                    if self._attached:
                        await self._queue.put(chunk)
                    elif self._kept is None:
                        break  # nobody to read it, nothing to keep
                else:
                    complete = True
        except TimeoutError:
            pass  # past the lease with no client: closed as a stream whose client left
        finally:
            self._deadline = None  # the upstream is read no more: nothing left to bound
            try:
                with contextlib.suppress(Exception):
                    await frames.aclose()
                await self._relay.close()  # closes the upstream, meters once
                kept = complete and self._relay.status == 200 and self._relay.stream.finished
                await self._on_end(self._kept if kept else None)
            finally:
                if self._attached:
                    await self._queue.put(None)

    def _record(self, chunk: bytes) -> None:
        if self._kept is None:
            return
        self._size += len(chunk)
        if self._size > self._max_bytes:
            self._kept = None  # over the cap: not kept, a retry runs anew
        else:
            self._kept.append(chunk)


class StoredStream:
    """A stored stream's chunks, relayed again to a retry in the order they first went out."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def frames(self) -> AsyncGenerator[bytes, None]:
        for chunk in self._chunks:
            yield chunk

    def client_stalled(self, timeout_s: float) -> None:
        return None

    async def close(self) -> None:
        return None
