"""An upstream stream once it has produced its first frames: the frames the client is relayed.

Read with `next_frames()` (a coroutine, not an async generator, so that a compiled build compiles
it, docs/performance.md) and closed with `close()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.dispatch.sse import SSEDecoder
from gateway.errors import UpstreamTooLarge
from gateway.providers.base import StreamTranslator
from gateway.routing.deployment import Deployment

if TYPE_CHECKING:
    from gateway.dispatch.executor import InFlight, Reply


class OpenStream:
    """An upstream stream that has produced its first frames; `next_frames()` until None relays it."""

    def __init__(
        self,
        deployment: Deployment,
        translator: StreamTranslator,
        reply: Reply,
        decoder: SSEDecoder,
        in_flight: InFlight,
        max_bytes: int,
    ) -> None:
        self.deployment = deployment
        self.translator = translator
        self.reply = reply
        self.decoder = decoder
        self.in_flight = in_flight
        self.max_bytes = max_bytes
        self.first_frames: list[bytes] = []
        self.received = 0
        self.frames_sent = 0
        self.finished = False  # the upstream ended the stream and every frame was decoded
        self._closed = False

    async def read_first_frames(self) -> None:
        """Read until there is something to send: the gateway commits to this stream only then."""
        while not self.first_frames:
            chunk = await self.reply.next_chunk()
            if chunk is None:
                self.first_frames.extend(self._tail())
                return
            self.count(len(chunk))
            for data in self.decoder.feed(chunk):
                self.first_frames.extend(self.translator.feed(data))

    def count(self, size: int) -> None:
        self.received += size
        if self.received > self.max_bytes:
            raise UpstreamTooLarge("The upstream stream exceeds the gateway's size limit")

    async def next_frames(self) -> bytes | None:
        """The next OpenAI SSE frames, joined; None once the stream has ended.

        The frames decoded from one upstream read go out together, in one write: nothing waits
        for anything that has not arrived, and a burst costs one send instead of one per frame.
        An error (`GatewayError`) after the first byte is the caller's to report in-band."""
        if self.first_frames:
            first, self.first_frames = self.first_frames, []
            self.frames_sent += len(first)
            return b"".join(first)
        while not self.finished:
            chunk = await self.reply.next_chunk()
            if chunk is None:
                tail = self._tail()
                return b"".join(tail) if tail else None
            self.count(len(chunk))
            out: list[bytes] = []
            for data in self.decoder.feed(chunk):
                out.extend(self.translator.feed(data))
            if out:
                self.frames_sent += len(out)
                return b"".join(out)
        return None

    def _tail(self) -> list[bytes]:
        """What the decoder and translator hold once the upstream has ended (not counted as sent)."""
        tail: list[bytes] = []
        for data in self.decoder.close():
            tail.extend(self.translator.feed(data))
        tail.extend(self.translator.finish())
        self.finished = True
        return tail

    async def close(self) -> None:
        """Stop counting the stream in flight and give its connection back (or drop it); idempotent."""
        if self._closed:
            return
        self._closed = True
        self.in_flight.release()
        await self.reply.aclose()
