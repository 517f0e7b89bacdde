"""Anthropic's Messages API end to end: the official `anthropic` SDK -> `gateway serve` -> the mock.

Against an Anthropic-kind provider (passed through) and OpenAI-compatible ones (translated):
replies and stream events checked with the SDK's own types, the key as `x-api-key` or Bearer,
errors as the SDK's exception classes, batch pins, cache hints as the upstream receives them,
usage records, a tool round trip, and count_tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import anthropic.types
import httpx
import pytest
from pydantic import TypeAdapter

from tests.e2e.stacks.messages import MessagesStack, expected_cost, messages_stack
from tests.support.gateway import Team
from tests.support.upstream import RunningUpstream, fresh

pytestmark = pytest.mark.e2e

EVENTS: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)
HELLO = [{"role": "user", "content": "Hello there"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HANDBOOK = "The handbook. " * 300  # long enough to be worth caching
UPSTREAM_PATHS = {"claude": "/v1/messages", "gpt": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    yield from messages_stack(tmp_path_factory.mktemp("messages"))


@pytest.fixture(scope="module")
def team(stack: MessagesStack) -> Team:
    return stack.new_team("messages-team")


@pytest.fixture
def upstream(stack: MessagesStack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def strict_message(payload: dict[str, Any]) -> anthropic.types.Message:
    return anthropic.types.Message.model_validate(payload, strict=True)


def raw_events(stack: MessagesStack, key: str, **params: Any) -> list[dict[str, Any]]:
    """A stream's events as sent, each checked: its `event:` line names its type, and its data is
    a valid stream event to the SDK's types (strictly)."""
    body = {"max_tokens": 64, "stream": True, **params}
    events: list[dict[str, Any]] = []
    name = None
    with httpx.stream(
        "POST", f"{stack.gateway.base_url}/v1/messages", json=body, headers={"x-api-key": key}
    ) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                payload = json.loads(line.removeprefix("data: "))
                assert name == payload["type"], line
                if name != "ping":  # the SDK has no type for ping; the API sends it
                    EVENTS.validate_python(payload, strict=True)
                events.append(payload)
    return events


# --- the round trip, both ways ---------------------------------------------------------------


def test_an_anthropic_provider_receives_the_request_as_sent(
    stack: MessagesStack, team: Team, upstream: RunningUpstream
) -> None:
    params = {
        "model": "claude",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "Be terse."}],
        "messages": HELLO,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"},
    }
    sampling = {"temperature": 0.5, "top_k": 5}
    raw = stack.client(team.key).messages.with_raw_response.create(**params, extra_body=sampling)
    message = strict_message(raw.http_response.json())
    assert message.model == "claude" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert raw.headers["x-gateway-provider"] == "msg-anthropic"
    [sent] = upstream.requests()
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "upstream-secret-anthropic"
    assert sent["headers"]["anthropic-version"]
    assert sent["body"] == {**params, **sampling, "model": "claude-up"}
    assert Decimal(raw.http_response.json()["usage"]["cost"]) == expected_cost("claude", message.usage)


@pytest.mark.parametrize("model", ["gpt", "gpt-azure", "local"])
def test_other_kinds_get_a_translated_request_and_answer_a_message(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str
) -> None:
    raw = stack.client(team.key).messages.with_raw_response.create(
        model=model, max_tokens=40, system="Be terse.", messages=HELLO, stop_sequences=["END"]
    )
    message = strict_message(raw.http_response.json())
    assert message.model == model and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    if model == "gpt":
        [sent] = upstream.requests()
        assert sent["path"] == "/v1/chat/completions"
        assert sent["headers"]["authorization"] == "Bearer upstream-secret-openai"
        assert sent["body"] == {
            "model": "gpt-up",
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "user", "content": "Hello there"},
            ],
            "max_tokens": 40,
            "stop": ["END"],
        }
        assert Decimal(raw.http_response.json()["usage"]["cost"]) == expected_cost("gpt", message.usage)


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_a_stream_is_anthropics_event_sequence(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str
) -> None:
    events = raw_events(stack, team.key, model=model, messages=HELLO)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "content_block_delta" in kinds and kinds.count("content_block_start") == kinds.count(
        "content_block_stop"
    )
    assert events[0]["message"]["model"] == model
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text
    usage = events[-2]["usage"]
    assert usage["output_tokens"] > 0
    assert upstream.requests()[-1]["path"] == UPSTREAM_PATHS[model]

    sdk_events = list(
        stack.client(team.key).messages.create(model=model, max_tokens=64, messages=HELLO, stream=True)
    )
    assert sdk_events[0].type == "message_start" and sdk_events[-1].type == "message_stop"


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_the_stream_helper_assembles_the_final_message(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str
) -> None:
    with stack.client(team.key).messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.model == model and final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


# --- keys and errors -------------------------------------------------------------------------


def test_the_key_as_x_api_key_or_as_a_bearer_token(
    stack: MessagesStack, team: Team, upstream: RunningUpstream
) -> None:
    for client in (stack.client(team.key), stack.bearer_client(team.key)):
        assert client.messages.create(model="gpt", max_tokens=8, messages=HELLO).content
    for client in (stack.client("gk-not-a-real-key"), stack.bearer_client("gk-not-a-real-key")):
        with pytest.raises(anthropic.AuthenticationError) as refused:
            client.messages.create(model="claude", max_tokens=8, messages=HELLO)
        assert refused.value.status_code == 401
        assert refused.value.body["error"]["type"] == "authentication_error"
    assert len(upstream.requests()) == 2  # the refused ones never reached it


def test_errors_raise_the_sdks_exception_classes(
    stack: MessagesStack, team: Team, upstream: RunningUpstream
) -> None:
    client = stack.client(team.key)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="gpt", max_tokens=8, messages=[])
    assert bad.value.body["error"]["param"] == "messages"
    assert "messages" in str(bad.value)  # the SDK shows the gateway's error object

    refused = httpx.post(
        f"{stack.gateway.base_url}/v1/messages",
        json={"model": "claude", "messages": HELLO},
        headers={"x-api-key": team.key},
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens"

    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    with pytest.raises(anthropic.BadRequestError) as untranslatable:
        client.messages.create(model="gpt", max_tokens=8, messages=[{"role": "user", "content": [document]}])
    assert untranslatable.value.body["error"]["code"] == "unsupported_parameter"

    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=8, messages=HELLO)

    upstream.set_behaviour(fail_rate=1, fail_status=429)
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="claude", max_tokens=8, messages=HELLO)
    assert limited.value.response.headers.get("retry-after")

    upstream.set_behaviour(fail_rate=1, fail_status=500)
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="gpt", max_tokens=8, messages=HELLO)
    assert failed.value.status_code == 502


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_a_stream_cut_after_its_first_byte_raises_in_the_sdk(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str
) -> None:
    upstream.set_behaviour(fail_after_chunks=3, chunks=8)
    with pytest.raises(anthropic.APIStatusError) as cut:
        list(stack.client(team.key).messages.create(model=model, max_tokens=64, messages=HELLO, stream=True))
    assert cut.value.body["type"] == "error"  # Anthropic's envelope, its error type by status (502)
    assert cut.value.body["error"]["type"] == "api_error"
    helper = stack.client(team.key).messages.stream(model=model, max_tokens=64, messages=HELLO)
    with pytest.raises(anthropic.APIStatusError), helper as stream:  # never a quietly shortened message
        stream.get_final_message()


@pytest.mark.parametrize(
    ("model", "refused"),
    [
        (
            "claude-capped",
            {
                "system": [
                    {"type": "text", "text": f"{i}", "cache_control": {"type": "ephemeral"}} for i in range(5)
                ]
            },
        ),
        (
            "gpt-capped",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                            }
                        ],
                    }
                ]
            },
        ),
    ],
)
def test_a_refused_stream_gives_its_capacity_permit_back(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str, refused: dict[str, Any]
) -> None:
    client = stack.client(team.key)
    for _ in range(2):  # the provider takes one request at a time: a kept permit would block the next
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(
                **{"model": model, "max_tokens": 8, "messages": HELLO, "stream": True, **refused}
            )
    assert client.messages.create(model=model, max_tokens=8, messages=HELLO).content


# --- batches, cache hints, metering ------------------------------------------------------------


def test_a_batch_stays_on_one_deployment(stack: MessagesStack, team: Team, upstream: RunningUpstream) -> None:
    client = stack.client(team.key, default_headers={"X-Gateway-Batch": "messages-batch-1"})
    served = set()
    for i in range(8):
        if i % 2:
            raw = client.messages.with_raw_response.create(model="mixed", max_tokens=8, messages=HELLO)
            served.add(raw.headers["x-gateway-provider"])
            assert strict_message(raw.http_response.json()).model == "mixed"
        else:
            with client.messages.with_streaming_response.create(
                model="mixed", max_tokens=8, messages=HELLO, stream=True
            ) as streamed:
                served.add(streamed.headers["x-gateway-provider"])
                assert b"message_stop" in streamed.read()
    assert len(served) == 1
    assert len({request["path"] for request in upstream.requests()}) == 1
    batch = httpx.get(
        f"{stack.gateway.base_url}/v1/gateway/batches/messages-batch-1",
        headers={"authorization": f"Bearer {team.key}"},
    ).json()
    assert batch["provider"] == served.pop()


def _cached_system() -> list[dict[str, Any]]:
    return [{"type": "text", "text": HANDBOOK, "cache_control": {"type": "ephemeral"}}]


def test_cache_hints_reach_anthropic_as_sent_and_cached_tokens_are_metered(
    stack: MessagesStack, upstream: RunningUpstream
) -> None:
    team = stack.new_team("messages-cache-anthropic")
    client = stack.client(team.key)
    replies = [
        client.messages.create(model="claude", max_tokens=16, system=_cached_system(), messages=HELLO)
        for _ in range(2)
    ]
    first, second = (reply.usage for reply in replies)
    assert first.cache_creation_input_tokens and not first.cache_read_input_tokens
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert all(sent["body"]["system"] == _cached_system() for sent in upstream.requests())
    events = sorted(stack.events(team.id, 2), key=lambda event: event["cache_write_tokens"])
    for event, usage in zip(events, (second, first), strict=True):
        assert event["endpoint"] == "messages" and event["status"] == 200
        read, written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
        assert event["prompt_tokens"] == usage.input_tokens + read + written
        assert (event["completion_tokens"], event["cached_tokens"], event["cache_write_tokens"]) == (
            usage.output_tokens,
            read,
            written,
        )
        assert Decimal(event["cost"]) == expected_cost("claude", usage)


def test_cache_hints_become_a_prompt_cache_key_for_openai_and_cached_tokens_come_back(
    stack: MessagesStack, upstream: RunningUpstream
) -> None:
    team = stack.new_team("messages-cache-openai")
    client = stack.client(team.key)
    replies = [
        client.messages.create(model="gpt", max_tokens=16, system=_cached_system(), messages=HELLO)
        for _ in range(2)
    ]
    sent = [request["body"] for request in upstream.requests()]
    assert all("cache_control" not in json.dumps(body) for body in sent)
    assert sent[0]["prompt_cache_key"] and sent[0]["prompt_cache_key"] == sent[1]["prompt_cache_key"]
    first, second = (reply.usage for reply in replies)
    assert not first.cache_read_input_tokens and second.cache_read_input_tokens
    events = stack.events(team.id, 2)
    assert sorted(event["cached_tokens"] for event in events) == [0, second.cache_read_input_tokens]
    cached = next(event for event in events if event["cached_tokens"])
    assert cached["prompt_tokens"] == second.input_tokens + second.cache_read_input_tokens
    assert Decimal(cached["cost"]) == expected_cost("gpt", second)


def test_more_breakpoints_than_anthropic_allows_is_a_400(
    stack: MessagesStack, team: Team, upstream: RunningUpstream
) -> None:
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as refused:
        stack.client(team.key).messages.create(model="claude", max_tokens=8, system=blocks, messages=HELLO)
    assert refused.value.body["error"]["code"] == "invalid_cache_control"
    assert upstream.requests() == []


def test_a_stream_is_metered_once_with_its_counts(stack: MessagesStack, upstream: RunningUpstream) -> None:
    team = stack.new_team("messages-stream-metering")
    for model in ("claude", "gpt"):
        with stack.client(team.key).messages.stream(model=model, max_tokens=16, messages=HELLO) as stream:
            final = stream.get_final_message()
        [event] = [e for e in stack.events(team.id, 1 + (model == "gpt")) if e["model"] == model]
        assert (event["endpoint"], event["usage_source"]) == ("messages", "upstream")
        assert event["completion_tokens"] == final.usage.output_tokens
        assert event["prompt_tokens"] == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)


# --- tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_a_tool_use_round_trip(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, model: str
) -> None:
    client = stack.client(team.key)
    question = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(
        model=model,
        max_tokens=64,
        messages=question,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    strict_message(first.model_dump(exclude_none=True))
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict)

    second = client.messages.create(
        model=model,
        max_tokens=64,
        tools=[WEATHER],
        messages=[
            *question,
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in first.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21C"}],
            },
        ],
    )
    assert second.stop_reason in ("end_turn", "max_tokens") and second.content[0].type == "text"
    sent = upstream.requests()[-1]["body"]
    if model == "gpt":
        assert sent["messages"][1]["tool_calls"][0]["id"] == call.id
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21C"}
        assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    else:
        assert sent["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": "Sunny, 21C",
        }


# --- count_tokens ------------------------------------------------------------------------------


def test_count_tokens_is_anthropics_count_where_an_anthropic_deployment_serves(
    stack: MessagesStack, upstream: RunningUpstream
) -> None:
    team = stack.new_team("messages-count")
    client = stack.client(team.key)
    raw = client.messages.with_raw_response.count_tokens(model="claude", system="Be terse.", messages=HELLO)
    counted = raw.parse()
    assert (
        raw.headers["x-gateway-token-count"] == "upstream"
        and raw.headers["x-gateway-provider"] == "msg-anthropic"
    )
    [sent] = upstream.requests()
    assert sent["path"] == "/v1/messages/count_tokens"
    assert sent["body"] == {"model": "claude-up", "system": "Be terse.", "messages": HELLO}
    created = client.messages.create(model="claude", max_tokens=8, system="Be terse.", messages=HELLO)
    assert counted.input_tokens == created.usage.input_tokens  # the count the request is billed with
    assert "estimated" not in raw.http_response.json()

    estimated = client.messages.with_raw_response.count_tokens(model="gpt", messages=HELLO)
    assert estimated.headers["x-gateway-token-count"] == "estimated"
    assert estimated.http_response.json()["estimated"] is True and estimated.parse().input_tokens > 0
    assert len(upstream.requests()) == 2  # the estimate asked no upstream

    # the create, and the forwarded count at no cost (the estimate reached no upstream: no record)
    records = stack.events(team.id, 2)
    assert sorted(r["endpoint"] for r in records) == ["messages", "messages/count_tokens"]
    assert [Decimal(r["cost"]) for r in records if r["endpoint"] == "messages/count_tokens"] == [0]
    with pytest.raises(anthropic.AuthenticationError):
        stack.client("gk-not-a-real-key").messages.count_tokens(model="claude", messages=HELLO)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=HELLO)
