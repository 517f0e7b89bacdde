"""`omit_usage` leaves the counts out of every answer the mock gives, whole or streamed, on every
completion-like endpoint: what a gateway must meter from its own estimate."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app

COUNT = re.compile(r'"\w*tokens":\s*\d')  # "input_tokens": 12, not "max_output_tokens": null
MESSAGES = [{"role": "user", "content": "hello"}]
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": MESSAGES, "stream_options": {"include_usage": True}},
    "/v1/completions": {"prompt": "hello", "stream_options": {"include_usage": True}},
    "/v1/embeddings": {"input": "hello"},
    "/v1/responses": {"input": "hello"},
    "/v1/messages": {"messages": MESSAGES, "max_tokens": 16},
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour(omit_usage=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


CASES = [
    (path, stream) for path in REQUESTS for stream in (False, True) if path != "/v1/embeddings" or not stream
]


@pytest.mark.parametrize(("path", "stream"), CASES)
async def test_no_answer_carries_usage(client: httpx.AsyncClient, path: str, stream: bool) -> None:
    body = {"model": "m", **REQUESTS[path], **({"stream": True} if stream else {})}
    if not stream:
        body.pop("stream_options", None)

    response = await client.post(path, json=body)

    assert response.status_code == 200
    assert '"usage":{' not in response.text  # chunks may say `"usage": null`, as OpenAI's do
    assert not COUNT.search(response.text)  # no count under another name either
