"""The relay of one SSE stream to the client: its frames, then one usage record however it ended;
and the streams each key has in flight at this process (`KeyStreams`).

`frames()` is what the front sends, an upstream error after the first byte ending it in-band;
`close()` closes the upstream and meters. They are apart because the front stops `frames()` by
cancelling it when the client leaves, and the metering must not be where that cancellation lands:
the front closes the relay once the frames are over (`gateway.api.front.sse_relay`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from gateway.dispatch.stream import OpenStream
from gateway.errors import GatewayError, TooManyStreams

log = structlog.get_logger("gateway.proxy")

# Records the usage of a stream that has ended, given the status and error code it ended with.
StreamMeter = Callable[[OpenStream, int, str | None], Awaitable[None]]

CLIENT_STALLED = "client_stalled"  # the error code of a stream whose client stopped taking bytes


class FrameSource(Protocol):
    """What the front relays (`gateway.api.front.sse_relay`): its frames, then one `close()`. A
    `StreamRelay`, or a keyed stream recorded or replayed (`gateway.idempotency.recording`)."""

    def frames(self) -> AsyncGenerator[bytes, None]: ...

    def client_stalled(self, timeout_s: float) -> None:
        """The client took nothing for `timeout_s`; called before `close()`."""
        ...

    async def close(self) -> None: ...


class StreamSlot:
    """One stream of a key counted in flight (`KeyStreams`) until `release()` (idempotent)."""

    __slots__ = ("_counts", "_held", "_key_id")

    def __init__(self, counts: dict[str, int], key_id: str) -> None:
        self._counts, self._key_id, self._held = counts, key_id, True
        counts[key_id] = counts.get(key_id, 0) + 1

    def release(self) -> None:
        if self._held:
            self._held = False
            left = self._counts[self._key_id] - 1
            if left:
                self._counts[self._key_id] = left
            else:
                del self._counts[self._key_id]  # a key without streams leaves nothing behind


class KeyStreams:
    """The streams each key has in flight at this process, at most `limit` a key: a client that
    opens streams and never reads them holds a capacity permit per stream until its write deadline,
    and one key must not hold every permit of a provider that way. Counted per process (the bound
    is on what one process relays, as its memory and connections are)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    def open(self, key_id: str) -> StreamSlot:
        """Count one more stream of `key_id`; TooManyStreams (429) when it has `limit` already."""
        if self._counts.get(key_id, 0) >= self.limit:
            raise TooManyStreams(
                f"This key has {self.limit} streams in flight at this gateway process already; "
                "finish or close one, then retry.",
                headers={"retry-after": "1"},
            )
        return StreamSlot(self._counts, key_id)

    def in_flight(self, key_id: str) -> int:
        return self._counts.get(key_id, 0)


def openai_error_frame(exc: GatewayError) -> bytes:
    """The in-band error of an OpenAI-format stream: a bare `data:` frame with the error object."""
    return b"data: " + exc.to_json() + b"\n\n"


@dataclass(slots=True)
class StreamRelay:
    """The frames of one stream for the client, and its close; `close()` runs once.
    `error_frame`: how the stream's API tells a failure after the first byte."""

    request_id: str
    stream: OpenStream
    meter: StreamMeter
    status: int = 200
    error_code: str | None = None
    closed: bool = False
    slot: StreamSlot | None = None  # the key's count of streams in flight, released on close
    watch: Callable[[bytes], None] | None = None  # sees each chunk of frames before it is sent
    error_frame: Callable[[GatewayError], bytes] = openai_error_frame

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The frames to send, several joined when one upstream read held them."""
        try:
            async with contextlib.aclosing(self.stream.frames()) as frames:
                async for frame in frames:
                    if self.watch is not None:
                        self.watch(frame)
                    yield frame
        except GatewayError as exc:
            self.status, self.error_code = exc.status, exc.code
            log.warning("stream_failed", request_id=self.request_id, code=exc.code)
            yield self.error_frame(exc)

    def client_stalled(self, timeout_s: float) -> None:
        """The client took none of the bytes sent for `timeout_s`: the front is closing its
        connection, and the record says 499 (unless the upstream had failed first)."""
        log.warning("stream_client_stalled", request_id=self.request_id, timeout_s=timeout_s)
        if self.error_code is None:
            self.status, self.error_code = 499, CLIENT_STALLED

    async def close(self) -> None:
        """Close the upstream and record the usage, once, however the relay ended (a client that
        walks away included). Both steps are bounded already: the upstream connection is given
        back without a wait, and the usage record goes to Redis within one round trip's timeout
        or else to the spool."""
        if self.closed:
            return
        self.closed = True
        if self.slot is not None:
            self.slot.release()
        try:
            await self.stream.close()
        finally:
            await self.meter(self.stream, self.status, self.error_code)
