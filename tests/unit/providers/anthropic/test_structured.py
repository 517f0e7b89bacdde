"""response_format on Anthropic models: a forced answer tool out, its input back as JSON content;
the reply's model is the alias and its usage carries the exact cost."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, TypeAdapter

from gateway.errors import InvalidRequest
from gateway.metering.pricing import Tariff
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import StreamTranslator, TokenUsage, UpstreamCall
from gateway.settings import Price, ProviderKind
from tests.support.openapi import validate
from tests.unit.providers.calls import call, provider, sse_payloads

ADAPTER = AnthropicAdapter(clock=lambda: 1700000000.0)
BASE = "https://api.anthropic.com"
PROVIDER = provider(ProviderKind.ANTHROPIC, base_url=BASE, anthropic_version="2023-06-01")
TARIFF = Tariff(Price(input=Decimal("3"), output=Decimal("15"), cached_input=Decimal("0.3")))
REQUESTS = TypeAdapter(MessageCreateParamsNonStreaming)
USER = [{"role": "user", "content": "Who wrote Dune?"}]
BOOK_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["title", "year"],
    "additionalProperties": False,
}
BOOK_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "Book", "schema": BOOK_SCHEMA, "strict": True},
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class Book(BaseModel):
    title: str
    year: int


def structured(**fields: Any) -> dict[str, Any]:
    return {"model": "claude", "messages": USER, "response_format": BOOK_FORMAT, **fields}


def sent(body: dict[str, Any]) -> dict[str, Any]:
    request = ADAPTER.build_request(call(body, upstream_model="claude-sonnet-4-5"), PROVIDER, BASE)
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


def priced(upstream_call: UpstreamCall) -> UpstreamCall:
    return dataclasses.replace(upstream_call, tariff=TARIFF)


def message(*content: dict[str, Any], stop_reason: str = "tool_use", usage: Any = None) -> bytes:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 40, "output_tokens": 12, "cache_read_input_tokens": 100},
    }
    return json.dumps(body).encode()


def tool_use(name: str, tool_input: dict[str, Any], block_id: str = "toolu_1") -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": tool_input}


def reply(body: dict[str, Any], upstream: bytes) -> dict[str, Any]:
    response = ADAPTER.parse_response(priced(call(body)), upstream)
    decoded: dict[str, Any] = json.loads(response.body)
    validate("CreateChatCompletionResponse", decoded)
    return decoded


# --- the request ------------------------------------------------------------------------------


def test_json_schema_becomes_a_forced_tool() -> None:
    request = sent(structured())
    assert request["tools"] == [
        {
            "name": "Book",
            "input_schema": BOOK_SCHEMA,
            "description": "Give your final answer by calling this tool: its input is the answer.",
        }
    ]
    assert request["tool_choice"] == {"type": "tool", "name": "Book", "disable_parallel_tool_use": True}
    assert "response_format" not in request and "strict" not in json.dumps(request)
    REQUESTS.validate_python(request)


def test_json_schema_description_and_missing_parts() -> None:
    spec = {"name": "Answer", "description": "The answer, in short."}
    request = sent(structured(response_format={"type": "json_schema", "json_schema": spec}))
    assert request["tools"] == [
        {"name": "Answer", "input_schema": {"type": "object"}, "description": "The answer, in short."}
    ]
    untyped = {"properties": {"a": {"type": "string"}}}
    nameless = sent(structured(response_format={"type": "json_schema", "json_schema": {"schema": untyped}}))
    assert nameless["tools"][0]["name"] == "json_response"
    assert nameless["tools"][0]["input_schema"] == {"type": "object", **untyped}


def test_json_object_is_an_open_object_tool() -> None:
    request = sent(structured(response_format={"type": "json_object"}))
    (tool,) = request["tools"]
    assert (tool["name"], tool["input_schema"]) == ("json_object", {"type": "object"})
    assert request["tool_choice"] == {
        "type": "tool",
        "name": "json_object",
        "disable_parallel_tool_use": True,
    }
    REQUESTS.validate_python(request)


def test_text_format_changes_nothing() -> None:
    plain = {"model": "claude", "messages": USER}
    assert sent({**plain, "response_format": {"type": "text"}}) == sent(plain)


def test_client_tools_are_kept_and_the_model_must_call_one_of_them_or_answer() -> None:
    request = sent(structured(tools=[WEATHER_TOOL], parallel_tool_calls=False))
    assert [tool["name"] for tool in request["tools"]] == ["get_weather", "Book"]
    assert request["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    REQUESTS.validate_python(request)


def test_tool_choice_none_with_tools_forces_the_answer() -> None:
    request = sent(structured(tools=[WEATHER_TOOL], tool_choice="none"))
    assert [tool["name"] for tool in request["tools"]] == ["get_weather", "Book"]
    assert request["tool_choice"] == {"type": "tool", "name": "Book", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", {"type": "any"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_a_tool_the_client_forces_wins_over_the_answer_tool(choice: Any, expected: dict[str, Any]) -> None:
    request = sent(structured(tools=[WEATHER_TOOL], tool_choice=choice))
    assert [tool["name"] for tool in request["tools"]] == ["get_weather"]
    assert request["tool_choice"] == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "get_weather"}},
          "tools": [WEATHER_TOOL]}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b"}}},
         "response_format.json_schema.name"),
        ({"response_format": {"type": "json_schema", "json_schema": "Book"}}, "response_format.json_schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "L", "schema": {"type": "array"}}}},
         "response_format.json_schema.schema"),
        ({"n": 2}, "n"),
    ],
)  # fmt: skip
def test_what_cannot_be_translated_is_a_clear_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        sent(structured(**fields))
    assert (caught.value.status, caught.value.param) == (400, param)


def test_n_above_one_names_the_alternative() -> None:
    with pytest.raises(InvalidRequest, match="send n requests instead") as caught:
        sent({"model": "claude", "messages": USER, "n": 3})
    assert caught.value.code == "unsupported_parameter"


# --- the reply --------------------------------------------------------------------------------


def test_the_answer_tool_input_is_the_content() -> None:
    preamble = {"type": "text", "text": "Here is the book:"}
    body = reply(structured(), message(preamble, tool_use("Book", {"title": "Dune", "year": 1965})))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    assert json.loads(choice["message"]["content"]) == {"title": "Dune", "year": 1965}
    parsed = ChatCompletion.model_validate(body).choices[0].message.content
    assert Book.model_validate_json(parsed or "") == Book(title="Dune", year=1965)


def test_json_object_reply_parses() -> None:
    body = reply(
        structured(response_format={"type": "json_object"}),
        message(tool_use("json_object", {"answer": ["a", 1, None]})),
    )
    assert json.loads(body["choices"][0]["message"]["content"]) == {"answer": ["a", 1, None]}


def test_a_client_tool_called_instead_of_answering_stays_a_tool_call() -> None:
    body = reply(structured(tools=[WEATHER_TOOL]), message(tool_use("get_weather", {"city": "Oslo"})))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    }


def test_an_answer_cut_short_is_length() -> None:
    body = reply(structured(), message(tool_use("Book", {"title": "Du"}), stop_reason="max_tokens"))
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_tool_named_like_a_schema_is_a_tool_call_without_response_format() -> None:
    plain = {"model": "claude", "messages": USER}
    body = reply(plain, message(tool_use("Book", {"title": "Dune"})))
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Book"
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_reply_names_the_alias_and_carries_the_exact_cost() -> None:
    upstream = message(tool_use("Book", {"title": "Dune", "year": 1965}))
    response = ADAPTER.parse_response(priced(call(structured())), upstream)
    body = json.loads(response.body)
    assert body["model"] == "claude"
    usage = TokenUsage(prompt_tokens=140, completion_tokens=12, cached_tokens=100)
    assert response.usage == usage
    # 40 input tokens at $3, 100 cached at $0.30 and 12 output at $15 a million
    assert response.cost == TARIFF.cost(usage) == Decimal("0.00033")
    assert body["usage"]["cost"] == format(response.cost, "f")


def test_no_cost_without_a_tariff_or_without_believed_counts() -> None:
    upstream = message({"type": "text", "text": "hi"}, stop_reason="end_turn")
    unpriced = json.loads(ADAPTER.parse_response(call({"model": "claude", "messages": USER}), upstream).body)
    assert "cost" not in unpriced["usage"]
    assert ADAPTER.parse_response(call({"model": "claude", "messages": USER}), upstream).cost is None
    assert unpriced["model"] == "claude"
    poisoned = message(stop_reason="end_turn", usage={"input_tokens": -5, "output_tokens": 1})
    untrusted = ADAPTER.parse_response(priced(call({"model": "claude", "messages": USER})), poisoned)
    assert untrusted.usage is None and untrusted.cost is None
    assert "usage" not in json.loads(untrusted.body)


# --- the stream -------------------------------------------------------------------------------


def stream_events(*blocks: tuple[dict[str, Any], list[str]], stop_reason: str = "tool_use") -> list[Any]:
    start = {"id": "msg_s", "type": "message", "role": "assistant", "content": [],
             "model": "claude-sonnet-4-5-20250929", "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 30, "output_tokens": 1, "cache_read_input_tokens": 0}}  # fmt: skip
    events: list[Any] = [{"type": "message_start", "message": start}]
    for index, (block, pieces) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        kind = "text_delta" if block["type"] == "text" else "input_json_delta"
        field = "text" if kind == "text_delta" else "partial_json"
        events.extend(
            {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: piece}}
            for piece in pieces
        )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 9}}
    )
    events.append({"type": "message_stop"})
    return events


def run_stream(
    body: dict[str, Any], events: list[Any], upstream_call: UpstreamCall | None = None
) -> list[Any]:
    return translated(ADAPTER.stream_translator(upstream_call or streamed(body)), events)


def streamed(body: dict[str, Any]) -> UpstreamCall:
    return priced(call({**body, "stream": True}, client_wants_usage=True))


def translated(translator: StreamTranslator, events: list[Any]) -> list[Any]:
    """The chunks of the stream (`[DONE]` left off), each a valid OpenAI stream chunk."""
    frames = [frame for event in events for frame in translator.feed(json.dumps(event).encode())]
    payloads = sse_payloads(frames + translator.finish())
    assert payloads[-1] == "[DONE]"
    for payload in payloads[:-1]:
        validate("CreateChatCompletionStreamResponse", payload)
    return payloads[:-1]


def content_of(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def finish_of(chunks: list[Any]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
    ]


def test_streamed_answer_pieces_are_content_deltas() -> None:
    answer = {"type": "tool_use", "id": "toolu_1", "name": "Book", "input": {}}
    chunks = run_stream(
        structured(),
        stream_events(
            ({"type": "text", "text": ""}, ["Sure."]), (answer, ['{"title": "Du', 'ne", "year": 1965}'])
        ),
    )
    assert content_of(chunks) == '{"title": "Dune", "year": 1965}'
    assert not any("tool_calls" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert finish_of(chunks) == ["stop"]
    assert {c["model"] for c in chunks} == {"claude"}


def test_streamed_empty_answer_is_an_empty_object() -> None:
    answer = {"type": "tool_use", "id": "toolu_1", "name": "json_object", "input": {}}
    chunks = run_stream(structured(response_format={"type": "json_object"}), stream_events((answer, [""])))
    assert json.loads(content_of(chunks)) == {}


def test_streamed_client_tool_beside_the_answer() -> None:
    weather = {"type": "tool_use", "id": "toolu_w", "name": "get_weather", "input": {}}
    answer = {"type": "tool_use", "id": "toolu_a", "name": "Book", "input": {}}
    second = {"type": "tool_use", "id": "toolu_b", "name": "Book", "input": {}}
    chunks = run_stream(
        structured(tools=[WEATHER_TOOL]),
        stream_events(
            (weather, ['{"city": "Oslo"}']), (answer, ['{"title": "A"}']), (second, ['{"title": "B"}'])
        ),
    )
    calls = [d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [(d["index"], d.get("id")) for d in calls] == [(0, "toolu_w"), (0, None)]
    assert content_of(chunks) == '{"title": "A"}'  # one answer: a second one would not parse
    assert finish_of(chunks) == ["tool_calls"]


def test_stream_usage_chunk_carries_the_cost() -> None:
    answer = {"type": "tool_use", "id": "toolu_1", "name": "Book", "input": {}}
    translator = ADAPTER.stream_translator(streamed(structured()))
    chunks = translated(translator, stream_events((answer, ['{"title": "Dune", "year": 1965}'])))
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["model"] == "claude"
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (30, 9)
    # the record takes the translator's cost: 30 input tokens at $3 and 9 output at $15 a million
    assert (
        translator.cost
        == TARIFF.cost(TokenUsage(prompt_tokens=30, completion_tokens=9))
        == Decimal("0.000225")
    )
    assert usage["cost"] == format(translator.cost, "f")


def test_stream_without_a_tariff_has_no_cost() -> None:
    plain = {"model": "claude", "messages": USER, "stream": True}
    events = stream_events(({"type": "text", "text": ""}, ["hi"]), stop_reason="end_turn")
    chunks = run_stream(plain, events, call(plain, client_wants_usage=True))
    assert content_of(chunks) == "hi"
    assert "cost" not in chunks[-1]["usage"]
    assert {c["model"] for c in chunks} == {"claude"}
