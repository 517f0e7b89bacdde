"""The in-process httpx transport: the same answers, streamed, with timeouts and drops."""

from __future__ import annotations

import time

import httpx
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.transport import InProcessMockTransport

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def client_for(behaviour: MockBehaviour, timeout: float = 5.0) -> httpx.AsyncClient:
    transport = InProcessMockTransport(behaviour)
    return httpx.AsyncClient(transport=transport, base_url="http://mock-eu/v1", timeout=timeout)


async def test_streams_frame_by_frame_with_the_chunk_delay() -> None:
    async with client_for(MockBehaviour(chunk_delay_ms=20, chunks=2)) as client:
        arrivals: list[float] = []
        async with client.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as response:
            async for _ in response.aiter_raw():
                arrivals.append(time.monotonic())
    assert len(arrivals) == 5  # role, two content chunks, finish, [DONE]
    assert arrivals[-1] - arrivals[0] >= 0.07


async def test_latency_delays_the_first_byte() -> None:
    async with client_for(MockBehaviour(latency_ms=50)) as client:
        started = time.monotonic()
        response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.05


async def test_hang_ends_in_the_clients_read_timeout() -> None:
    async with client_for(MockBehaviour(hang=True), timeout=0.1) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/chat/completions", json=CHAT)


async def test_slow_chunks_end_in_the_clients_read_timeout() -> None:
    async with client_for(MockBehaviour(chunk_delay_ms=500), timeout=0.1) as client:
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as response:
                await response.aread()


async def test_dropped_stream_looks_like_a_closed_connection() -> None:
    async with client_for(MockBehaviour(fail_after_chunks=2)) as client:
        received: list[bytes] = []
        async with client.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as response:
            with pytest.raises(httpx.RemoteProtocolError):  # noqa: PT012 -- the drop comes mid-iteration
                async for chunk in response.aiter_raw():
                    received.append(chunk)
    assert len(received) == 2


async def test_control_endpoints_work_under_the_base_url_and_record() -> None:
    transport = InProcessMockTransport(MockBehaviour())
    async with httpx.AsyncClient(transport=transport, base_url="http://mock/v1") as client:
        await client.post("/embeddings", json={"model": "e", "input": "x"})
        recorded = (await client.get("/_mock/requests")).json()
    assert recorded[0]["path"] == "/v1/embeddings"
    assert transport.upstream.recorder.stats()["total"] == 1
