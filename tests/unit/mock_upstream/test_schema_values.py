"""Values the mock generates for a JSON schema conform to it, and a forced tool's input uses them."""

from __future__ import annotations

import datetime
import enum
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import msgspec
import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.schema_values import schema_value, tool_arguments
from mock_upstream.server import create_mock_app


class Genre(enum.Enum):
    NOVEL = "novel"
    POEM = "poem"


class Author(BaseModel):
    name: str
    born: datetime.date
    email: str = Field(json_schema_extra={"format": "email"})


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=7, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]


class Chapter(BaseModel):
    title: str
    sections: list[Chapter]


class Book(BaseModel):
    id: uuid.UUID
    title: str = Field(min_length=8, max_length=10)
    pages: int = Field(gt=100, multiple_of=7)
    rating: float = Field(lt=0.5)
    genre: Genre
    authors: list[Author] = Field(min_length=2)
    subtitle: str | None
    pet: Cat | Dog = Field(discriminator="kind")
    isbn: tuple[int, str]
    chapter: Chapter
    in_print: bool
    published: datetime.datetime


def test_a_pydantic_schema_gets_a_value_that_validates() -> None:
    value = schema_value(to_strict_json_schema(Book))
    book = Book.model_validate(value)
    assert len(book.authors) == 2 and book.subtitle is not None
    assert book.pages % 7 == 0 and book.pages > 100
    assert book.genre is Genre.NOVEL and book.pet == Cat(kind="cat", lives=7)
    assert schema_value(to_strict_json_schema(Book)) == value  # deterministic


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "mock"),
        ({"type": "string", "maxLength": 2}, "mo"),
        ({"type": "string", "format": "date-time"}, "2024-01-01T00:00:00Z"),
        ({"type": "integer", "minimum": 5, "maximum": 9}, 5),
        ({"type": "integer", "exclusiveMaximum": 0}, -1),
        ({"type": "number", "minimum": 2.5}, 2.5),
        ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, 0.5),
        ({"type": "boolean"}, True),
        ({"type": ["null", "integer"]}, 1),
        ({"enum": ["b", "a"]}, "b"),
        ({"const": {"k": 1}}, {"k": 1}),
        ({"type": "array", "items": {"type": "integer"}}, [1]),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 0}, []),
        ({"type": "array", "items": {"type": "string"}, "minItems": 3}, ["mock", "mock", "mock"]),
        ({"type": "object"}, {}),
        ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}, {}),
        ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"required": ["b"]}]},
         {"a": 1, "b": "mock"}),
        ({"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}], "$defs": {"n": {"type": "number"}}}, 1.0),
        ({"$ref": "#/definitions/missing"}, "mock"),
    ],
)  # fmt: skip
def test_schema_keywords(schema: dict[str, Any], expected: Any) -> None:
    assert schema_value(schema) == expected


def test_a_schema_that_requires_itself_ends() -> None:
    loop = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    value = schema_value(loop)
    depth = 0
    while isinstance(value, dict):
        value, depth = value["next"], depth + 1
    assert value is None and depth > 1


def test_tool_arguments_are_always_an_object() -> None:
    assert tool_arguments(None) == {}
    assert tool_arguments({"type": "string"}) == {}
    assert tool_arguments({"type": "object", "required": ["q"]}) == {"q": "mock"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_mock_app(MockBehaviour(completion_tokens=6))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock") as client:
        yield client


async def test_forced_anthropic_tool_input_conforms_streamed_or_not(client: httpx.AsyncClient) -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "A book, please."}],
        "tools": [{"name": "Book", "input_schema": to_strict_json_schema(Book)}],
        "tool_choice": {"type": "tool", "name": "Book"},
    }
    message = (await client.post("/v1/messages", json=body)).json()
    (block,) = message["content"]
    assert (block["type"], block["name"], message["stop_reason"]) == ("tool_use", "Book", "tool_use")
    Book.model_validate(block["input"])
    streamed = (await client.post("/v1/messages", json={**body, "stream": True})).text
    data = [line.removeprefix("data: ") for line in streamed.splitlines() if line.startswith("data: ")]
    deltas = [
        event["delta"] for event in map(msgspec.json.decode, data) if event["type"] == "content_block_delta"
    ]
    assert len(deltas) > 1 and {delta["type"] for delta in deltas} == {"input_json_delta"}
    streamed_input = "".join(delta["partial_json"] for delta in deltas)
    assert Book.model_validate_json(streamed_input) == Book.model_validate(block["input"])


async def test_a_chat_json_schema_answer_is_json_the_schema_accepts(client: httpx.AsyncClient) -> None:
    schema = {"name": "Author", "schema": to_strict_json_schema(Author), "strict": True}
    body = {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "An author, please."}],
        "response_format": {"type": "json_schema", "json_schema": schema},
    }
    (choice,) = (await client.post("/v1/chat/completions", json=body)).json()["choices"]
    assert choice["finish_reason"] == "stop"
    whole = Author.model_validate_json(choice["message"]["content"])
    streamed = (await client.post("/v1/chat/completions", json={**body, "stream": True})).text
    data = [line.removeprefix("data: ") for line in streamed.splitlines() if line.startswith("data: {")]
    pieces = [
        c["delta"].get("content") or "" for chunk in map(msgspec.json.decode, data) for c in chunk["choices"]
    ]
    assert Author.model_validate_json("".join(pieces)) == whole
    json_object = {**body, "response_format": {"type": "json_object"}}
    (choice,) = (await client.post("/v1/chat/completions", json=json_object)).json()["choices"]
    assert isinstance(msgspec.json.decode(choice["message"]["content"]), dict)
