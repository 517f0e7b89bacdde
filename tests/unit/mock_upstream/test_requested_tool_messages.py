"""`call_tool` on Anthropic's Messages API: the mock calls the named tool (a `tool_use` block, whole
and streamed) until the conversation ends with a `tool_result` turn, then answers in text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app

READ = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}
ARGUMENTS = {"file_path": "/work/note.txt"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour(call_tool="Read", call_arguments=ARGUMENTS))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


def messages_body(*, answered: bool, stream: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "read the note"}]},
        {"role": "system", "content": "Be brief."},
    ]
    if answered:
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "pelican"}],
            },
        ]
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}, {"name": "Read", "input_schema": READ}]
    return {"model": "m", "max_tokens": 64, "messages": messages, "tools": tools, "stream": stream}


async def test_the_tool_is_called_then_the_answer_is_text(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/messages", json=messages_body(answered=False))).json()
    second = (await client.post("/v1/messages", json=messages_body(answered=True))).json()

    assert first["stop_reason"] == "tool_use"
    (call,) = first["content"]
    assert (call["type"], call["name"], call["input"]) == ("tool_use", "Read", ARGUMENTS)
    assert call["id"].startswith("toolu_")
    assert second["stop_reason"] == "end_turn"
    assert [block["type"] for block in second["content"]] == ["text"]


async def test_a_streamed_turn_calls_the_tool(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=messages_body(answered=False, stream=True))
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    started = next(event for event in events if event["type"] == "content_block_start")
    assert started["content_block"]["name"] == "Read"
    arguments = "".join(
        event["delta"]["partial_json"] for event in events if event["type"] == "content_block_delta"
    )
    assert json.loads(arguments) == ARGUMENTS
    assert (
        next(event for event in events if event["type"] == "message_delta")["delta"]["stop_reason"]
        == "tool_use"
    )
