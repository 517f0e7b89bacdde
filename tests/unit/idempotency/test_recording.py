"""A keyed stream: its client gets every chunk in order, with the upstream slowed by a slow client;
when the client leaves, the upstream is read to its end and the whole stream kept (metered once,
as a finished stream); a stream that fails, or outgrows the cap with nobody left to read it, is
not kept; one left with a silent upstream is closed once its lease from the leaving has passed.
The upstream stream is a stand-in with the `OpenStream` surface `StreamRelay` reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from gateway.errors import UpstreamUnavailable
from gateway.idempotency.recording import RecordedStream, StoredStream
from gateway.proxy.relay import StreamRelay

CHUNKS = [b"data: %d\n\n" % n for n in range(6)] + [b"data: [DONE]\n\n"]


class Upstream:
    """An upstream stream: `chunks` one by one, `delay_s` apart, then finished (or failing)."""

    def __init__(self, chunks: list[bytes], delay_s: float = 0.0, fail_after: int | None = None) -> None:
        self.chunks, self.delay_s, self.fail_after = chunks, delay_s, fail_after
        self.read = 0
        self.finished = self.closed = False

    async def frames(self) -> AsyncGenerator[bytes, None]:
        for index, chunk in enumerate(self.chunks):
            if index == self.fail_after:
                raise UpstreamUnavailable("the upstream went away")
            await asyncio.sleep(self.delay_s)
            self.read += 1
            yield chunk
        self.finished = True

    async def close(self) -> None:
        self.closed = True


class Recorded:
    def __init__(self, upstream: Upstream, max_bytes: int = 10_000, lease_s: float = 5.0) -> None:
        self.upstream = upstream
        self.metered: list[tuple[int, str | None]] = []
        self.kept: list[list[bytes] | None] = []
        relay = StreamRelay("req_1", upstream, self.meter)  # type: ignore[arg-type]
        self.stream = RecordedStream(relay, max_bytes, lease_s, self.on_end)

    async def meter(self, stream: Any, status: int, error_code: str | None) -> None:
        self.metered.append((status, error_code))

    async def on_end(self, chunks: list[bytes] | None) -> None:
        self.kept.append(chunks)

    async def read(self, count: int | None = None) -> list[bytes]:
        """What a client reads: `count` chunks, then it leaves (None: all of them)."""
        got: list[bytes] = []
        frames = self.stream.frames()
        async for chunk in frames:
            got.append(chunk)
            if len(got) == count:
                break
        await frames.aclose()
        await self.stream.close()
        return got


async def test_the_client_gets_every_chunk_and_the_stream_is_kept() -> None:
    recorded = Recorded(Upstream(CHUNKS))

    got = await recorded.read()
    await recorded.stream.task

    assert got == CHUNKS
    assert recorded.kept == [CHUNKS]
    assert recorded.metered == [(200, None)]
    assert recorded.upstream.closed


async def test_a_slow_client_holds_the_upstream_back() -> None:
    recorded = Recorded(Upstream(CHUNKS))
    frames = recorded.stream.frames()
    await anext(frames)
    await asyncio.sleep(0.05)

    assert recorded.upstream.read <= 4  # one taken, two queued, one waiting for room
    await frames.aclose()
    await recorded.stream.close()
    await recorded.stream.task


async def test_a_stream_whose_client_left_is_read_to_its_end_and_kept() -> None:
    recorded = Recorded(Upstream(CHUNKS, delay_s=0.01))

    got = await recorded.read(count=1)
    await asyncio.wait_for(recorded.stream.task, 2)

    assert got == CHUNKS[:1]
    assert recorded.kept == [CHUNKS]
    assert recorded.metered == [(200, None)]
    assert recorded.upstream.finished  # metered as a whole stream, not a client disconnect


async def test_a_stream_that_fails_after_its_first_byte_is_not_kept() -> None:
    recorded = Recorded(Upstream(CHUNKS, fail_after=3))

    got = await recorded.read()
    await recorded.stream.task

    assert got[:3] == CHUNKS[:3] and b"error" in got[-1]  # reported in-band
    assert recorded.kept == [None]
    assert recorded.metered[0][0] == 503


async def test_a_stream_over_the_cap_with_nobody_reading_is_closed_and_not_kept() -> None:
    long = [b"x" * 100] * 50
    recorded = Recorded(Upstream(long, delay_s=0.01), max_bytes=500)

    await recorded.read(count=1)
    await asyncio.wait_for(recorded.stream.task, 2)

    assert recorded.kept == [None]
    assert recorded.upstream.read < len(long)  # not read on for nothing
    assert len(recorded.metered) == 1 and not recorded.upstream.finished  # metered as cut short
    assert recorded.upstream.closed


async def test_a_stream_left_with_a_silent_upstream_ends_with_its_lease() -> None:
    recorded = Recorded(Upstream(CHUNKS, delay_s=0.3), lease_s=0.1)

    await recorded.read(count=1)
    await asyncio.wait_for(recorded.stream.task, 2)

    assert recorded.kept == [None]
    assert recorded.upstream.read < len(CHUNKS)
    assert len(recorded.metered) == 1 and not recorded.upstream.finished
    assert recorded.upstream.closed


async def test_a_stored_stream_replays_its_chunks_in_order() -> None:
    stored = StoredStream(CHUNKS)

    assert [chunk async for chunk in stored.frames()] == CHUNKS
