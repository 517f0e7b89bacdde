"""An upstream stream once it has produced its first frames: the frames the client is relayed.

The executor reads a stream up to its first frames (`read_first_frames`) and hands it over; the
relay reads the rest with `frames()` and ends it with `close()`, however the relay ended.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from gateway.dispatch.sse import SSEDecoder
from gateway.dispatch.upstream import InFlight, Reply
from gateway.errors import UpstreamTooLarge
from gateway.providers.base import StreamTranslator
from gateway.routing.deployment import Deployment


@dataclass(slots=True)
class OpenStream:
    """An upstream stream that has produced its first frames (or ended before any)."""

    deployment: Deployment
    translator: StreamTranslator
    reply: Reply
    in_flight: InFlight
    max_bytes: int
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    first_frames: list[bytes] = field(default_factory=list)
    received: int = 0
    frames_sent: int = 0
    finished: bool = False  # the upstream ended the stream and every frame was decoded
    closed: bool = False
    # The reply's body, read by `read_first_frames` and then by `frames()`: one iterator for both.
    chunks: AsyncGenerator[bytes, None] = field(init=False)

    def __post_init__(self) -> None:
        self.chunks = self.reply.chunks()

    async def read_first_frames(self) -> None:
        """Read until there is something to send: the gateway commits to this stream only then."""
        async for chunk in self.chunks:
            self.first_frames += self._decode(chunk)
            if self.first_frames:
                return
        self.first_frames += self._tail()

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The OpenAI SSE frames, the first ones included, until the upstream ends the stream.

        The frames decoded from one upstream read go out together, in one write: nothing waits
        for anything that has not arrived, and a burst costs one send instead of one per frame.
        An error (`GatewayError`) after the first byte is the caller's to report in-band."""
        if self.first_frames:
            first, self.first_frames = self.first_frames, []
            self.frames_sent += len(first)
            yield b"".join(first)
        if self.finished:
            return
        async for chunk in self.chunks:
            if frames := self._decode(chunk):
                self.frames_sent += len(frames)
                yield b"".join(frames)
        if tail := self._tail():
            yield b"".join(tail)

    def _decode(self, chunk: bytes) -> list[bytes]:
        self.received += len(chunk)
        if self.received > self.max_bytes:
            raise UpstreamTooLarge("The upstream stream exceeds the gateway's size limit")
        frames: list[bytes] = []
        for data in self.decoder.feed(chunk):
            frames += self.translator.feed(data)
        return frames

    def _tail(self) -> list[bytes]:
        """What the decoder and translator hold once the upstream has ended (not counted as sent)."""
        tail: list[bytes] = []
        for data in self.decoder.close():
            tail += self.translator.feed(data)
        tail += self.translator.finish()
        self.finished = True
        return tail

    async def close(self) -> None:
        """Stop counting the stream in flight and give its connection back (or drop it); idempotent."""
        if self.closed:
            return
        self.closed = True
        self.in_flight.release(self.translator.usage)
        try:
            await self.chunks.aclose()
        finally:
            await self.reply.aclose()
