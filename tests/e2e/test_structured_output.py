"""Structured output on an Anthropic deployment through the official OpenAI SDK: `parse` and
`stream` with a Pydantic model, `json_object`, `n`, and the reply's alias and cost."""

from __future__ import annotations

import datetime
import json
import time
from decimal import Decimal
from typing import Any

import openai
import pytest
from pydantic import BaseModel, Field

from tests.e2e.conftest import Stack
from tests.support.gateway import Team
from tests.support.openapi import validate

MESSAGES: Any = [{"role": "user", "content": "Name a book and its author."}]


class Author(BaseModel):
    name: str
    born: datetime.date


class Book(BaseModel):
    title: str
    year: int = Field(ge=1450)
    genres: list[str]
    authors: list[Author]
    subtitle: str | None


def records(stack: Stack, team: Team, expected: int = 1) -> list[dict[str, Any]]:
    """The team's usage records, once `expected` of them are written."""
    rows: list[dict[str, Any]] = []
    for _ in range(60):
        rows = stack.admin.get("/admin/usage/events", params={"team_id": team.id}).json()["data"]
        if len(rows) >= expected:
            return rows
        time.sleep(0.25)
    return rows


def test_parse_with_a_pydantic_model(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("structured-parse")
    raw = stack.client(team.key).chat.completions.with_raw_response.parse(
        model="claude", messages=MESSAGES, response_format=Book
    )
    validate("CreateChatCompletionResponse", raw.http_response.json())
    completion = raw.parse()
    choice = completion.choices[0]
    assert isinstance(choice.message.parsed, Book)
    assert choice.message.parsed == Book.model_validate_json(choice.message.content or "")
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert completion.model == "claude"
    sent = fresh_upstream.requests()[-1]["body"]
    assert sent["tool_choice"] == {"type": "tool", "name": "Book", "disable_parallel_tool_use": True}
    assert [tool["name"] for tool in sent["tools"]] == ["Book"]
    assert "response_format" not in sent
    (record,) = records(stack, team)
    assert record["request_id"] == raw.headers["x-request-id"]
    assert completion.usage is not None and completion.usage.completion_tokens == record["completion_tokens"]
    cost = (completion.usage.model_extra or {})["cost"]
    assert Decimal(cost) == Decimal(str(record["cost"])) > 0
    assert raw.headers["x-gateway-cost"] == cost


def test_stream_with_a_pydantic_model(stack: Stack, fresh_upstream) -> None:
    team = stack.new_team("structured-stream")
    fresh_upstream.set_behaviour(chunks=4)
    chunks = []
    with stack.client(team.key).chat.completions.stream(
        model="claude", messages=MESSAGES, response_format=Book, stream_options={"include_usage": True}
    ) as stream:
        for event in stream:
            if event.type == "chunk":
                chunks.append(event.chunk)
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Book)
    assert final.choices[0].finish_reason == "stop"
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) > 1, "the answer arrives in pieces"
    assert {chunk.model for chunk in chunks} == {"claude"}
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.model_dump(exclude_unset=True))
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    (record,) = records(stack, team)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        record["prompt_tokens"],
        record["completion_tokens"],
    )
    assert Decimal((usage.model_extra or {})["cost"]) == Decimal(str(record["cost"])) > 0
    assert fresh_upstream.requests()[-1]["body"]["stream"] is True


def test_json_object_content_is_json(stack: Stack, team_a: Team, fresh_upstream) -> None:
    client = stack.client(team_a.key)
    for stream in (False, True):
        if stream:
            pieces = client.chat.completions.create(
                model="claude",
                messages=[{"role": "user", "content": "Reply in JSON."}],
                response_format={"type": "json_object"},
                stream=True,
            )
            content = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
        else:
            completion = client.chat.completions.create(
                model="claude",
                messages=[{"role": "user", "content": "Reply in JSON."}],
                response_format={"type": "json_object"},
            )
            content = completion.choices[0].message.content or ""
        assert isinstance(json.loads(content), dict)
        sent = fresh_upstream.requests()[-1]["body"]
        assert sent["tools"][0]["input_schema"] == {"type": "object"}
        assert sent["tool_choice"]["name"] == "json_object"


class GetWeather(BaseModel):
    city: str


def test_client_tools_beside_a_schema_stay_callable(stack: Stack, team_a: Team, fresh_upstream) -> None:
    weather = openai.pydantic_function_tool(GetWeather, name="get_weather")
    completion = stack.client(team_a.key).chat.completions.parse(
        model="claude", messages=MESSAGES, response_format=Book, tools=[weather]
    )
    sent = fresh_upstream.requests()[-1]["body"]
    assert [tool["name"] for tool in sent["tools"]] == ["get_weather", "Book"]
    assert sent["tool_choice"] == {"type": "any"}
    # the model may call either; the mock calls the first tool, which the client then runs
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and call.function.parsed_arguments == GetWeather(city="mock")
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.parsed is None


@pytest.mark.parametrize("stream", [False, True])
def test_n_above_one_is_a_clear_400(stack: Stack, team_a: Team, fresh_upstream, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client(team_a.key).chat.completions.create(
            model="claude", messages=MESSAGES, n=2, stream=stream
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("unsupported_parameter", "n")
    assert "send n requests instead" in error["message"]
    assert fresh_upstream.requests() == [], "refused before anything is sent"
