"""The fake provider refuses requests that would size its answer past OpenAI's bounds."""

from __future__ import annotations

import httpx
import pytest

from gateway.mockupstream.behaviour import BehaviourError, MockBehaviour, with_overrides
from gateway.mockupstream.routes import MAX_BATCH, MAX_CHOICES, MAX_DIMENSIONS
from gateway.mockupstream.transport import InProcessMockTransport

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


async def post(path: str, body: dict[str, object]) -> httpx.Response:
    transport = InProcessMockTransport(MockBehaviour())
    async with httpx.AsyncClient(transport=transport, base_url="http://mock/v1", timeout=5) as client:
        return await client.post(path, json=body)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/chat/completions", {**CHAT, "n": 2**40}, "'n'"),
        ("/completions", {"model": "m", "prompt": "x", "n": MAX_CHOICES + 1}, "'n'"),
        ("/completions", {"model": "m", "prompt": ["x"] * (MAX_BATCH + 1)}, "array"),
        ("/embeddings", {"model": "e", "input": ["x"] * (MAX_BATCH + 1)}, "array"),
        ("/embeddings", {"model": "e", "input": "x", "dimensions": 10**12}, "'dimensions'"),
    ],
)
async def test_an_answer_past_the_bounds_is_a_400_not_a_billion_items(
    path: str, body: dict[str, object], field: str
) -> None:
    reply = await post(path, body)
    assert reply.status_code == 400
    assert field in reply.json()["error"]["message"]


async def test_the_bounds_themselves_are_served() -> None:
    chat = await post("/chat/completions", {**CHAT, "n": MAX_CHOICES})
    assert chat.status_code == 200 and len(chat.json()["choices"]) == MAX_CHOICES
    embedding = await post("/embeddings", {"model": "e", "input": "x", "dimensions": MAX_DIMENSIONS})
    assert embedding.status_code == 200 and len(embedding.json()["data"][0]["embedding"]) == MAX_DIMENSIONS


def test_a_behaviour_that_would_generate_without_bound_is_refused() -> None:
    with pytest.raises(BehaviourError):
        with_overrides(MockBehaviour(), {"completion_tokens": 10**9})
    with pytest.raises(BehaviourError):
        with_overrides(MockBehaviour(), {"chunks": 10**9})
