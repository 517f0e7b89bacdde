"""OpenAI's Responses API through the gateway with the official SDK: passed through to an upstream
that serves it, translated to chat (a self-hosted server) and on to Anthropic; streaming and not,
tools, `parse`, batch pins, what is refused, and the usage record of each request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.e2e.stacks.responses import ResponsesStack, responses_stack
from tests.support.gateway import Team
from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, fresh

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
# alias -> (the provider that serves it, the upstream path the request lands on)
NATIVE = {"gpt": ("openai-us", "/us/v1/responses"), "gpt-azure": ("azure-eu", "/openai/v1/responses")}
TRANSLATED = {"llama": ("selfhosted", "/v1/chat/completions"), "claude": ("claude-direct", "/v1/messages")}
EVERY_ALIAS = {**NATIVE, **TRANSLATED}
PINNED = {"X-Gateway-Provider": "openai-us"}  # `gpt` has a second deployment, in eu-west


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResponsesStack]:
    yield from responses_stack(tmp_path_factory.mktemp("responses"))


@pytest.fixture
def upstream(stack: ResponsesStack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def headers_for(alias: str) -> dict[str, str]:
    return PINNED if alias == "gpt" else {}


def the_record(stack: ResponsesStack, team: Team, request_id: str) -> dict[str, Any]:
    for _ in range(3):
        for record in stack.records(team, 1):
            if record["request_id"] == request_id:
                return record
    raise AssertionError(f"no usage record {request_id}")


def assert_metered(
    stack: ResponsesStack, team: Team, request_id: str, usage: dict[str, Any], provider: str
) -> None:
    """The request's usage record: endpoint responses, the reply's counts, the reply's cost."""
    record = the_record(stack, team, request_id)
    assert (record["endpoint"], record["status"], record["provider"]) == ("responses", 200, provider)
    assert record["usage_source"] == "upstream"
    assert record["prompt_tokens"] == usage["input_tokens"] > 0
    assert record["completion_tokens"] == usage["output_tokens"] > 0
    assert record["cached_tokens"] == usage["input_tokens_details"]["cached_tokens"]
    assert Decimal(record["cost"]) == Decimal(usage["cost"]) > 0


@pytest.mark.parametrize("alias", list(EVERY_ALIAS))
def test_create(stack: ResponsesStack, upstream: RunningUpstream, alias: str) -> None:
    team = stack.new_team(f"create-{alias}")
    client = stack.client(team.key, default_headers=headers_for(alias))
    raw = client.responses.with_raw_response.create(
        model=alias,
        instructions="Be brief.",
        input="Tell me about the sea.",
        max_output_tokens=64,
        user="u-1",
    )
    body = raw.http_response.json()
    validate("Response", body)
    response = raw.parse()
    assert response.model == alias
    assert response.status == "completed"
    assert response.output_text
    provider, path = EVERY_ALIAS[alias]
    assert raw.headers["x-gateway-provider"] == provider
    sent = upstream.requests()[-1]
    assert sent["path"] == path
    if alias in NATIVE:  # passed through as sent, the upstream model swapped in
        assert sent["body"]["input"] == "Tell me about the sea."
        assert sent["body"]["instructions"] == "Be brief."
        assert sent["body"]["max_output_tokens"] == 64
    elif alias == "llama":
        assert sent["body"]["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Tell me about the sea."},
        ]
        assert sent["body"]["max_tokens"] == 64
    else:
        assert sent["body"]["system"] == [{"type": "text", "text": "Be brief."}]
        assert sent["body"]["max_tokens"] == 64
    assert sent["body"]["model"] != alias
    assert_metered(stack, team, raw.headers["x-request-id"], body["usage"], provider)


@pytest.mark.parametrize("alias", list(EVERY_ALIAS))
def test_stream(stack: ResponsesStack, upstream: RunningUpstream, alias: str) -> None:
    team = stack.new_team(f"stream-{alias}")
    client = stack.client(team.key, default_headers=headers_for(alias))
    raw = client.responses.with_raw_response.create(model=alias, input="Stream to me.", stream=True)
    events = list(raw.parse())
    request_id = raw.headers["x-request-id"]
    for event in events:
        validate("ResponseStreamEvent", event.model_dump(exclude_unset=True, mode="json"))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    final = events[-1].response
    assert text and final.output_text == text
    assert final.model == alias
    usage = final.model_dump(mode="json")["usage"]
    assert_metered(stack, team, request_id, usage, EVERY_ALIAS[alias][0])
    sent = upstream.requests()[-1]
    assert sent["body"]["stream"] is True
    if alias == "llama":
        assert sent["body"]["stream_options"] == {"include_usage": True}  # asked for, to meter


@pytest.mark.parametrize("alias", ["gpt", "llama", "claude"])
def test_the_stream_helper_assembles_the_final_response(
    stack: ResponsesStack, upstream: RunningUpstream, alias: str
) -> None:
    team = stack.new_team(f"helper-{alias}")
    client = stack.client(team.key, default_headers=headers_for(alias))
    with client.responses.stream(model=alias, input="Once more, streamed.") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas)
    assert final.usage is not None and final.usage.output_tokens > 0


@pytest.mark.parametrize("alias", list(EVERY_ALIAS))
def test_tool_calling_round_trip(stack: ResponsesStack, upstream: RunningUpstream, alias: str) -> None:
    team = stack.new_team(f"tools-{alias}")
    client = stack.client(team.key, default_headers=headers_for(alias))
    question: Any = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.responses.create(model=alias, input=question, tools=[WEATHER_TOOL], tool_choice="required")
    validate("Response", first.model_dump(mode="json", exclude_unset=True))
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)

    # The reply's output items go back as they are, as OpenAI's guide has it, then the tool's result.
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21C"}
    answer: Any = [*question, *first.output, output]
    second = client.responses.create(model=alias, input=answer, tools=[WEATHER_TOOL])
    assert second.output_text
    sent = upstream.requests()[-1]["body"]
    if alias in NATIVE:
        assert (sent["input"][1]["type"], sent["input"][1]["call_id"]) == ("function_call", call.call_id)
        assert sent["input"][2] == output
    elif alias == "llama":
        assert sent["messages"][1]["tool_calls"][0]["id"] == call.call_id
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21C"}
    else:
        assert sent["messages"][1]["content"][0]["type"] == "tool_use"
        assert sent["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": call.call_id,
            "content": "Sunny, 21C",
        }


@pytest.mark.parametrize("alias", ["gpt", "llama", "claude"])
def test_a_stream_cut_after_its_first_events_ends_in_an_error(
    stack: ResponsesStack, upstream: RunningUpstream, alias: str
) -> None:
    team = stack.new_team(f"cut-{alias}")
    upstream.set_behaviour(chunks=8, fail_after_chunks=4)
    received: list[Any] = []
    stream = stack.client(team.key, default_headers=headers_for(alias)).responses.create(
        model=alias, input="A long story.", stream=True
    )
    with pytest.raises(openai.APIError):
        received.extend(stream)
    assert received and received[0].type == "response.created"
    assert not any(event.type == "response.completed" for event in received)
    assert len(upstream.requests()) == 1  # never retried after the first byte
    (record,) = stack.records(team, 1)
    assert (record["endpoint"], record["status"]) == ("responses", 502)


def test_a_streamed_tool_call(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    team = stack.new_team("streamed-tools")
    with stack.client(team.key).responses.stream(
        model="claude", input="Weather in Oslo?", tools=[WEATHER_TOOL], tool_choice="required"
    ) as stream:
        argument_deltas = [
            event.delta for event in stream if event.type == "response.function_call_arguments.delta"
        ]
        final = stream.get_final_response()
    call = final.output[-1]
    assert call.type == "function_call"
    assert call.arguments == "".join(argument_deltas)
    assert json.loads(call.arguments)["city"]


class City(BaseModel):
    name: str
    country: str
    population: int


@pytest.mark.parametrize("alias", ["gpt", "claude"])
def test_parse_with_a_pydantic_model(stack: ResponsesStack, upstream: RunningUpstream, alias: str) -> None:
    team = stack.new_team(f"parse-{alias}")
    client = stack.client(team.key, default_headers=headers_for(alias))
    parsed = client.responses.parse(model=alias, input="The largest city of Norway?", text_format=City)
    assert isinstance(parsed.output_parsed, City)
    assert parsed.output_parsed == City.model_validate_json(parsed.output_text)
    sent = upstream.requests()[-1]["body"]
    if alias == "claude":  # json_schema became a forced tool with the schema as its input
        assert sent["tools"][0]["input_schema"]["required"] == ["name", "country", "population"]
    else:
        assert sent["text"]["format"]["type"] == "json_schema"


def test_a_batch_stays_on_one_deployment(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    team = stack.new_team("responses-batch")
    client = stack.client(team.key, default_headers={"X-Gateway-Batch": "responses-run-1"})
    providers = set()
    for i in range(6):
        raw = client.responses.with_raw_response.create(model="gpt", input=f"Document {i}")
        providers.add(raw.headers["x-gateway-provider"])
    assert len(providers) == 1
    paths = {request["path"] for request in upstream.requests()}
    assert len(paths) == 1
    records = stack.records(team, 6)
    assert {(r["batch_id"], r["provider"], r["endpoint"]) for r in records} == {
        ("responses-run-1", providers.pop(), "responses")
    }


def test_an_incomplete_answer_says_so(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    team = stack.new_team("incomplete")
    for alias in ("gpt", "llama", "claude"):  # the mock writes 16 tokens unless told fewer
        client = stack.client(team.key, default_headers=headers_for(alias))
        response = client.responses.create(model=alias, input="A long story.", max_output_tokens=8)
        assert response.status == "incomplete", alias
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage is not None and response.usage.output_tokens == 8


@pytest.mark.parametrize(
    ("alias", "extra", "param"),
    [
        ("llama", {"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ("claude", {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
        ("claude", {"background": True}, "background"),
    ],
)
def test_what_a_translated_provider_cannot_do_is_a_clear_400(
    stack: ResponsesStack, upstream: RunningUpstream, alias: str, extra: dict[str, Any], param: str
) -> None:
    team = stack.new_team(f"refused-{alias}-{param}")
    with pytest.raises(openai.BadRequestError) as raised:
        stack.client(team.key).responses.create(model=alias, input="x", **extra)
    error = raised.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == (param, "unsupported_parameter")
    assert raised.value.status_code == 400
    assert upstream.requests() == []  # refused before anything was sent


def test_store_and_previous_response_id_reach_an_upstream_that_keeps_state(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    team = stack.new_team("stateful")
    client = stack.client(team.key, default_headers=PINNED)
    first = client.responses.create(model="gpt", input="Hello.", store=True)
    response = client.responses.create(model="gpt", input="More.", previous_response_id=first.id, store=True)
    assert response.previous_response_id == first.id  # the team's own (tests/e2e/test_response_ownership.py)
    sent = upstream.requests()[-1]["body"]
    assert (sent["previous_response_id"], sent["store"]) == (first.id, True)


def test_an_upstream_failure_is_an_openai_error(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    team = stack.new_team("failing")
    upstream.set_behaviour(fail_rate=1, fail_status=500)
    for alias in ("gpt", "claude"):
        with pytest.raises(openai.InternalServerError) as raised:
            stack.client(team.key, default_headers=headers_for(alias)).responses.create(
                model=alias, input="x"
            )
        assert raised.value.status_code == 502
        assert isinstance(raised.value.body, dict) and raised.value.body["type"] == "upstream_error"


def test_an_unknown_response_is_a_404(stack: ResponsesStack) -> None:
    team = stack.new_team("read-back")  # stored Responses: tests/e2e/test_stored_responses.py
    with pytest.raises(openai.NotFoundError) as raised:
        stack.client(team.key).responses.retrieve("resp_123")
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "response_id"


def test_the_endpoint_is_in_the_openapi_schema(stack: ResponsesStack) -> None:
    schema = stack.admin.get("/schema/openapi.json").json()
    operation = schema["paths"]["/v1/responses"]["post"]
    properties = operation["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert {"model", "input", "instructions", "tools", "text", "gateway"} <= set(properties)
    assert "text/event-stream" in operation["responses"]["200"]["content"]
