"""Streams that break: upstream failure after the first byte, and a client that walks away."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.e2e.conftest import Stack

MESSAGES = [{"role": "user", "content": "a long story"}]


def _records(stack: Stack, team_id: str, expected: int = 1) -> list[dict[str, object]]:
    for _ in range(40):
        rows = stack.admin.get("/admin/usage/events", params={"team_id": team_id}).json()["data"]
        if len(rows) >= expected:
            time.sleep(0.5)
            return stack.admin.get("/admin/usage/events", params={"team_id": team_id}).json()["data"]  # type: ignore[no-any-return]
        time.sleep(0.25)
    return []


def test_failure_after_first_byte_is_an_sse_error_and_not_retried(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("midstream-failure")
    fresh_upstream.set_behaviour(chunks=8, fail_after_chunks=3)
    received: list[object] = []
    stream = stack.client(team.key).chat.completions.create(model="chat", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError):
        received.extend(stream)
    assert received, "the first chunks arrive before the error"
    assert len(fresh_upstream.requests()) == 1, "never retried after the first byte"
    (record,) = _records(stack, team.id)
    assert record["status"] == 502
    assert record["usage_source"] == "estimated"
    assert record["completion_tokens"] == len(received)


def test_client_disconnect_cancels_and_meters_partial_usage(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("walks-away")
    fresh_upstream.set_behaviour(chunks=50, chunk_delay_ms=100)
    with httpx.stream(
        "POST",
        stack.base_url + "/chat/completions",
        headers={"authorization": f"Bearer {team.key}"},
        json={"model": "chat", "messages": MESSAGES, "stream": True},
        timeout=30,
    ) as response:
        lines = response.iter_lines()
        data = [line for line in (next(lines) for _ in range(6)) if line.startswith("data: ")]
    assert data
    (record,) = _records(stack, team.id)
    assert record["status"] == 499
    assert record["error_code"] == "client_disconnected"
    assert record["usage_source"] == "estimated"
    assert 1 <= record["completion_tokens"] < 50
