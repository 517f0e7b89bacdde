"""The proxy front's SSE relay: frames as they come, a client leaving or stalling stops it, clean-up
always runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from gateway.api.front.sse_relay import SSE, relay_sse

WRITE_TIMEOUT_S = 30.0  # far beyond what these clients take


class Upstream:
    """A relay's stand-in (`gateway.proxy.relay.StreamRelay`): frames, then a clean-up it records."""

    def __init__(self, frames: int, gap_s: float = 0.0) -> None:
        self.frame_count, self.gap_s = frames, gap_s
        self.closes = 0
        self.sent = 0
        self.frames_closed = False
        self.stalled_after_s: float | None = None

    @property
    def cleaned_up(self) -> bool:
        return self.closes > 0

    async def frames(self) -> AsyncGenerator[bytes, None]:
        try:
            while self.sent < self.frame_count:
                if self.gap_s:
                    await asyncio.sleep(self.gap_s)
                self.sent += 1
                yield b"data: %d\n\n" % (self.sent - 1)
        finally:
            self.frames_closed = True

    def client_stalled(self, timeout_s: float) -> None:
        assert not self.cleaned_up  # said before the clean-up meters
        self.stalled_after_s = timeout_s

    async def close(self) -> None:
        assert self.frames_closed or self.sent == 0  # the frames are over before the clean-up
        await asyncio.sleep(0)  # clean-up that awaits, as closing the upstream and metering do
        self.closes += 1


class Client:
    def __init__(
        self, leaves_after_s: float | None = None, send_fails: bool = False, upstream: Upstream | None = None
    ) -> None:
        self.messages: list[dict[str, Any]] = []
        self.leaves_after_s = leaves_after_s
        self.send_fails = send_fails
        self.done = asyncio.Event()
        self.upstream = upstream
        self.closed_before_the_end: bool | None = None

    async def receive(self) -> dict[str, Any]:
        if self.leaves_after_s is not None:
            await asyncio.sleep(self.leaves_after_s)
            return {"type": "http.disconnect"}
        await self.done.wait()  # uvicorn answers a disconnect once the response is complete
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if self.send_fails and message["type"] == "http.response.body":
            raise OSError("connection reset")
        self.messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.closed_before_the_end = self.upstream is not None and self.upstream.cleaned_up
            self.done.set()


async def test_every_frame_goes_out_then_the_end_of_the_body() -> None:
    upstream = Upstream(frames=5)
    client = Client(upstream=upstream)
    await relay_sse(
        client.receive, client.send, [SSE, (b"x-request-id", b"req_1")], upstream, WRITE_TIMEOUT_S
    )
    start, *bodies = client.messages
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert (b"x-request-id", b"req_1") in start["headers"]
    assert [m["body"] for m in bodies] == [b"data: %d\n\n" % i for i in range(5)] + [b""]
    assert [m["more_body"] for m in bodies] == [True] * 5 + [False]
    assert client.closed_before_the_end  # metered before the client has the whole stream
    assert upstream.closes == 1


async def test_a_client_leaving_stops_the_relay_at_once_and_the_clean_up_runs() -> None:
    upstream, client = Upstream(frames=1000, gap_s=0.01), Client(leaves_after_s=0.05)
    task = asyncio.current_task()
    assert task is not None
    await asyncio.wait_for(
        relay_sse(client.receive, client.send, [SSE], upstream, WRITE_TIMEOUT_S), timeout=5
    )
    assert upstream.cleaned_up
    assert upstream.sent < 50  # stopped within a few frames, not after the 1,000
    assert not client.done.is_set()  # the body was never ended: the client is gone
    assert task.cancelling() == 0  # the relay's own cancellation does not leak to its caller
    assert upstream.closes == 1


async def test_a_failed_send_still_closes_the_relay() -> None:
    upstream, client = Upstream(frames=5), Client(send_fails=True)
    with pytest.raises(OSError, match="connection reset"):
        await relay_sse(client.receive, client.send, [SSE], upstream, WRITE_TIMEOUT_S)
    assert upstream.cleaned_up


async def test_cancellation_from_outside_propagates_after_the_clean_up() -> None:
    upstream, client = Upstream(frames=1000, gap_s=0.01), Client()
    relay = asyncio.ensure_future(relay_sse(client.receive, client.send, [SSE], upstream, WRITE_TIMEOUT_S))
    await asyncio.sleep(0.05)
    relay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relay
    assert upstream.cleaned_up


async def test_a_head_that_cannot_be_sent_still_closes_the_relay() -> None:
    class Gone(Client):
        async def send(self, message: dict[str, Any]) -> None:
            raise OSError("connection reset")

    upstream = Upstream(frames=5)
    with pytest.raises(OSError, match="connection reset"):
        await relay_sse(Gone().receive, Gone().send, [SSE], upstream, WRITE_TIMEOUT_S)
    assert upstream.closes == 1
    assert upstream.sent == 0


async def test_a_client_leaving_between_two_sends_closes_the_frames_before_the_clean_up() -> None:
    class SlowClient(Client):
        async def send(self, message: dict[str, Any]) -> None:
            await asyncio.sleep(0.01)  # the client leaves while a frame is being sent
            await super().send(message)

    upstream, client = Upstream(frames=1000), SlowClient(leaves_after_s=0.05)
    await asyncio.wait_for(
        relay_sse(client.receive, client.send, [SSE], upstream, WRITE_TIMEOUT_S), timeout=5
    )
    assert upstream.frames_closed and upstream.closes == 1
    assert upstream.sent < 50


async def test_a_client_leaving_once_the_stream_is_whole_does_not_cancel_the_clean_up() -> None:
    class Metered(Upstream):
        async def close(self) -> None:
            await asyncio.sleep(0.05)  # the client leaves while the usage is being recorded
            self.closes += 1

    upstream, client = Metered(frames=2), Client(leaves_after_s=0.01)
    await relay_sse(client.receive, client.send, [SSE], upstream, WRITE_TIMEOUT_S)
    assert upstream.closes == 1
    assert client.done.is_set()  # the whole stream went out, its end included


class Transport:
    """What the relay finds on uvicorn's request cycle: the connection's transport."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class StalledClient(Client):
    """Takes `takes` messages, then never another: each send after that waits, as uvicorn's does
    while the connection's write buffer stays above its high-water mark."""

    def __init__(self, takes: int, upstream: Upstream | None = None) -> None:
        super().__init__(upstream=upstream)
        self.takes = takes
        self.transport = Transport()

    async def send(self, message: dict[str, Any]) -> None:
        if len(self.messages) >= self.takes:
            await asyncio.Event().wait()  # the client never drains the buffer
        await super().send(message)


async def test_a_client_that_stops_taking_bytes_ends_the_relay_and_loses_its_connection() -> None:
    upstream, client = Upstream(frames=1000), StalledClient(takes=3)
    await asyncio.wait_for(relay_sse(client.receive, client.send, [SSE], upstream, 0.05), timeout=5)
    assert upstream.stalled_after_s == 0.05  # the record says why the stream ended
    assert upstream.frames_closed and upstream.closes == 1  # the upstream closed, the usage metered
    assert client.transport.aborted  # the connection dropped, not left waiting for the client
    assert not client.done.is_set()  # the body was never ended
    assert upstream.sent < 10


async def test_a_stalled_head_ends_the_relay_too() -> None:
    upstream, client = Upstream(frames=5), StalledClient(takes=0)
    await asyncio.wait_for(relay_sse(client.receive, client.send, [SSE], upstream, 0.05), timeout=5)
    assert upstream.stalled_after_s == 0.05
    assert upstream.closes == 1 and upstream.sent == 0
    assert client.transport.aborted


async def test_a_client_that_stalls_at_the_end_of_a_whole_stream_loses_its_connection_only() -> None:
    upstream = Upstream(frames=4)
    client = StalledClient(takes=5, upstream=upstream)  # the head and the frames, not the end
    await asyncio.wait_for(relay_sse(client.receive, client.send, [SSE], upstream, 0.05), timeout=5)
    assert upstream.stalled_after_s is None  # whole and metered as such before the end went out
    assert upstream.closes == 1
    assert client.transport.aborted


async def test_a_slow_client_that_keeps_taking_bytes_gets_the_whole_stream() -> None:
    class SlowClient(StalledClient):
        async def send(self, message: dict[str, Any]) -> None:
            await asyncio.sleep(0.005)  # each send completes, far within the deadline
            await super().send(message)

    upstream, client = Upstream(frames=100), SlowClient(takes=1000)
    await relay_sse(client.receive, client.send, [SSE], upstream, 0.25)  # the whole takes longer
    assert upstream.stalled_after_s is None
    assert client.done.is_set() and len(client.messages) == 102
    assert not client.transport.aborted


async def test_a_stall_under_a_server_without_a_transport_still_ends_the_relay() -> None:
    class Stalled(Client):
        async def send(self, message: dict[str, Any]) -> None:
            await asyncio.Event().wait()

    upstream = Upstream(frames=5)
    await asyncio.wait_for(relay_sse(Stalled().receive, Stalled().send, [SSE], upstream, 0.05), timeout=5)
    assert upstream.stalled_after_s == 0.05 and upstream.closes == 1
