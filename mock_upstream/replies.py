"""A reply of the mock, independent of how it is sent: status, headers, a body or paced SSE frames."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from mock_upstream.behaviour import MockBehaviour

JSON_HEADERS = (("content-type", "application/json"),)
SSE_HEADERS = (("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"))


class StreamDropped(Exception):
    """The behaviour says to drop the connection at this point of the stream."""


@dataclass(slots=True)
class MockReply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    frames: list[bytes] | None = None  # set for a stream: the SSE frames, in order
    chunk_delay: float = 0.0  # seconds between frames
    drop_after: int | None = None  # raise StreamDropped after this many frames
    hang: bool = False  # never answer

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """The frames, paced by `chunk_delay`, raising StreamDropped after `drop_after` of them."""
        for index, frame in enumerate(self.frames or ()):
            if self.drop_after is not None and index >= self.drop_after:
                raise StreamDropped(f"dropped after {index} frames")
            if index and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield frame


def json_reply(status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> MockReply:
    return MockReply(status, [*JSON_HEADERS, *(headers or [])], body)


def stream_reply(frames: list[bytes], behaviour: MockBehaviour) -> MockReply:
    return MockReply(
        200,
        list(SSE_HEADERS),
        frames=frames,
        chunk_delay=behaviour.chunk_delay_ms / 1000,
        drop_after=behaviour.fail_after_chunks,
    )
