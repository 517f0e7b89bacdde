"""An upstream stream once it has produced its first frames: the frames the client is relayed.

Kept apart from the executor because it is an async generator: the executor and the proxy service
are compiled by mypyc in a compiled build (docs/performance.md), which does not compile those.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.dispatch.sse import SSEDecoder
from gateway.errors import UpstreamTooLarge
from gateway.providers.base import StreamTranslator
from gateway.routing.deployment import Deployment

if TYPE_CHECKING:
    from gateway.dispatch.executor import InFlight, Reply


@dataclass(slots=True)
class OpenStream:
    """An upstream stream that has produced its first frames; iterate `frames()` to relay it."""

    deployment: Deployment
    translator: StreamTranslator
    reply: Reply
    first_frames: list[bytes]
    decoder: SSEDecoder
    chunks: AsyncIterator[bytes]
    in_flight: InFlight
    max_bytes: int
    received: int = 0
    frames_sent: int = 0
    finished: bool = False

    async def read_first_frames(self) -> None:
        """Read until there is something to send: the gateway commits to this stream only then."""
        while not self.first_frames:
            chunk = await anext(self.chunks, None)
            if chunk is None:
                for data in self.decoder.close():
                    self.first_frames.extend(self.translator.feed(data))
                self.first_frames.extend(self.translator.finish())
                self.finished = True
                return
            self.count(len(chunk))
            for data in self.decoder.feed(chunk):
                self.first_frames.extend(self.translator.feed(data))

    def count(self, size: int) -> None:
        self.received += size
        if self.received > self.max_bytes:
            raise UpstreamTooLarge("The upstream stream exceeds the gateway's size limit")

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The rest of the stream as OpenAI SSE frames; errors after the first byte end it in-band.

        The frames decoded from one upstream read go out together, in one write: nothing waits
        for anything that has not arrived, and a burst costs one send instead of one per frame."""
        try:
            if self.first_frames:
                self.frames_sent += len(self.first_frames)
                yield b"".join(self.first_frames)
            async for chunk in self.chunks:
                self.count(len(chunk))
                out = [frame for data in self.decoder.feed(chunk) for frame in self.translator.feed(data)]
                if out:
                    self.frames_sent += len(out)
                    yield b"".join(out)
            tail = [frame for data in self.decoder.close() for frame in self.translator.feed(data)]
            tail += self.translator.finish()
            if tail:
                yield b"".join(tail)
            self.finished = True
        finally:
            self.in_flight.release()
            await self.reply.aclose()
