"""`call_tool`: the mock plays an agent's turn, a call of the named function tool while the
conversation does not end with a tool's output, then text; on chat completions and the Responses
API, whole and streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.server import create_mock_app

SHELL = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
ARGUMENTS = {"cmd": "echo hi"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour(call_tool="exec_command", call_arguments=ARGUMENTS))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


def chat_body(*, answered: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    if answered:
        call = {"id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        ]
    tools = [
        {"type": "function", "function": {"name": "view_image", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "exec_command", "parameters": SHELL}},
    ]
    return {"model": "m", "messages": messages, "tools": tools}


def responses_body(*, answered: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "list the files"}]
    if answered:
        items += [
            {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        ]
    tools = [
        {"type": "function", "name": "exec_command", "parameters": SHELL},
        {"type": "web_search", "external_web_access": False},
    ]
    return {"model": "m", "input": items, "tools": tools, "tool_choice": "auto"}


async def test_chat_calls_the_tool_then_answers_in_text(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/chat/completions", json=chat_body(answered=False))).json()
    second = (await client.post("/v1/chat/completions", json=chat_body(answered=True))).json()

    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "exec_command"
    assert json.loads(call["function"]["arguments"]) == ARGUMENTS
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert second["choices"][0]["message"]["content"]
    assert second["choices"][0]["finish_reason"] == "stop"


async def test_responses_calls_the_tool_then_answers_in_text(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/responses", json=responses_body(answered=False))).json()
    second = (await client.post("/v1/responses", json=responses_body(answered=True))).json()

    assert [item["type"] for item in first["output"]] == ["function_call"]
    assert first["output"][0]["name"] == "exec_command"
    assert json.loads(first["output"][0]["arguments"]) == ARGUMENTS
    assert [item["type"] for item in second["output"]] == ["message"]


async def test_a_streamed_responses_turn_calls_the_tool(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/responses", json={**responses_body(answered=False), "stream": True})

    assert '"type":"response.function_call_arguments.done"' in response.text
    assert '"name":"exec_command"' in response.text


async def test_a_request_without_the_tool_is_answered_in_text(client: httpx.AsyncClient) -> None:
    body = {**chat_body(answered=False), "tools": chat_body(answered=False)["tools"][:1]}

    answer = (await client.post("/v1/chat/completions", json=body)).json()

    assert answer["choices"][0]["message"]["content"]
    assert "tool_calls" not in answer["choices"][0]["message"]


async def test_without_arguments_the_call_has_values_its_schema_accepts() -> None:
    app = create_mock_app(MockBehaviour(call_tool="exec_command"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        answer = (await client.post("/v1/chat/completions", json=chat_body(answered=False))).json()

    arguments = json.loads(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    assert isinstance(arguments["cmd"], str)
