"""The fake provider refuses requests that would size its answer past OpenAI's bounds, or report a
count past the gateway's."""

from __future__ import annotations

import httpx
import pytest

from gateway.providers.usage_bounds import MAX_TOKENS
from mock_upstream.behaviour import BehaviourError, MockBehaviour, with_overrides
from mock_upstream.routes import MAX_BATCH, MAX_CHOICES, MAX_DIMENSIONS
from mock_upstream.transport import InProcessMockTransport

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


@pytest.mark.parametrize("override", [{"prompt_tokens": 3_000_000_000}, {"cached_tokens": MAX_TOKENS + 1}])
async def test_a_reported_count_past_the_gateways_bound_is_a_400(override: dict[str, int]) -> None:
    reply = await post("/chat/completions", {**CHAT, "mock": override})
    assert reply.status_code == 400
    assert next(iter(override)) in reply.json()["error"]["message"]


async def test_a_count_at_the_bound_is_reported() -> None:
    reply = await post("/chat/completions", {**CHAT, "mock": {"prompt_tokens": MAX_TOKENS}})
    assert reply.status_code == 200
    assert reply.json()["usage"]["prompt_tokens"] == MAX_TOKENS
