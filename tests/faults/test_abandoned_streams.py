"""Streams the client abandons half-way are metered once, as estimated, with status 499."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from tests.faults.conftest import StackFactory
from tests.faults.records import record_counts, report, wait_for_records

pytestmark = [
    pytest.mark.faults,
    pytest.mark.timeout(120),
]

STREAMS_PER_GATEWAY = 10
SLOW_STREAM = {
    "model": "chat",
    "messages": [{"role": "user", "content": "tell a long story"}],
    "stream": True,
    "mock": {"chunks": 200, "chunk_delay_ms": 20},  # about 4 s: the client leaves long before the end
}
FRAMES_BEFORE_LEAVING = 3


async def _abandon(client: httpx.AsyncClient, url: str, key: str) -> str:
    """Read a few SSE frames, then close the connection; returns the request id."""
    headers = {"authorization": f"Bearer {key}"}
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json=SLOW_STREAM, headers=headers
    ) as response:
        assert response.status_code == 200
        frames = 0
        async for line in response.aiter_lines():
            frames += line.startswith("data: ")
            if frames >= FRAMES_BEFORE_LEAVING:
                break
        return response.headers["x-request-id"]


async def _complete(client: httpx.AsyncClient, url: str, key: str) -> str:
    body = SLOW_STREAM | {"mock": {"chunks": 5}}
    headers = {"authorization": f"Bearer {key}"}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200
        lines = [line async for line in response.aiter_lines()]
        assert "data: [DONE]" in lines
        return response.headers["x-request-id"]


async def test_abandoned_streams_are_metered_once_as_estimated(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=2)
    team_id, key = stack.new_team("abandoned-streams")
    async with httpx.AsyncClient(timeout=30) as client:
        abandoned = await asyncio.gather(
            *(_abandon(client, url, key) for url in stack.urls for _ in range(STREAMS_PER_GATEWAY))
        )
        finished = await asyncio.gather(
            *(_complete(client, url, key) for url in stack.urls for _ in range(3))
        )

    records = await wait_for_records(
        stack.database_url, team_id, set(abandoned) | set(finished), timeout_s=10
    )
    assert set(abandoned) | set(finished) == records.keys()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    for request_id in abandoned:
        record = records[request_id]
        assert (record["status"], record["error_code"], record["usage_source"]) == (
            499,
            "client_disconnected",
            "estimated",
        )
        assert 1 <= record["completion_tokens"] < 200  # what was streamed before the client left
        assert record["prompt_tokens"] > 0
        assert record["cost"] > 0
    for request_id in finished:
        assert (records[request_id]["status"], records[request_id]["usage_source"]) == (200, "upstream")
    report(
        record_property,
        "abandoned_streams",
        {
            "abandoned": len(abandoned),
            "completed": len(finished),
            "estimated_completion_tokens": sorted(records[i]["completion_tokens"] for i in abandoned),
        },
    )
