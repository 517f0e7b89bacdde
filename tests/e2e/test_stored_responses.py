"""Stored Responses through `gateway serve` with the official SDKs: `store` (OpenAI's default) keeps
each Response for its team on every provider; retrieve, input_items, delete and input_tokens; a
`previous_response_id` continued on a translated provider (the conversation rebuilt, the previous
instructions left behind), passed through to the upstream that stores it, rebuilt for another; a
stream's Response continued at once; another team's id a 404 exactly like a missing one; and an
OpenAI Agents SDK run chained by previous_response_id, its tool turn included."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.stacks.responses import ResponsesStack, responses_stack
from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, fresh

PINNED = {"X-Gateway-Provider": "openai-us"}  # `gpt` passed through, at one deployment


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResponsesStack]:
    yield from responses_stack(tmp_path_factory.mktemp("stored-responses"))


@pytest.fixture
def upstream(stack: ResponsesStack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def last_sent(upstream: RunningUpstream) -> dict[str, Any]:
    body: dict[str, Any] = upstream.requests()[-1]["body"]
    return body


def texts(page: Any) -> list[str]:
    """The text of each input message of a page of input items."""
    return [item.model_dump()["content"][0]["text"] for item in page.data]


def test_a_stored_response_is_read_listed_and_deleted(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    client = stack.client(stack.new_team("crud").key)
    created = client.responses.create(
        model="llama",
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Tell me about the sea."},
            {"role": "user", "content": [{"type": "input_text", "text": "And the sky."}]},
        ],
    )
    assert created.store is True  # OpenAI's default, and kept

    raw = client.responses.with_raw_response.retrieve(created.id)
    validate("Response", raw.http_response.json())
    retrieved = raw.parse()
    assert (retrieved.id, retrieved.output_text, retrieved.store) == (created.id, created.output_text, True)
    assert retrieved.instructions == "Be brief."

    items = client.responses.input_items.list(created.id)
    assert texts(items) == ["And the sky.", "Tell me about the sea."]
    assert all(item.type == "message" and item.id for item in items.data)
    oldest = client.responses.input_items.list(created.id, order="asc", limit=1)
    assert (len(oldest.data), oldest.has_more) == (1, True)
    rest = client.responses.input_items.list(created.id, order="asc", after=oldest.data[0].id)
    assert texts(rest) == ["And the sky."]
    assert rest.has_more is False

    deleted = client.responses.with_raw_response.delete(created.id).http_response.json()
    assert deleted == {"id": created.id, "object": "response", "deleted": True}
    for read in (client.responses.retrieve, client.responses.input_items.list, client.responses.delete):
        with pytest.raises(openai.NotFoundError):
            read(created.id)


def test_store_false_keeps_nothing(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    client = stack.client(stack.new_team("unstored").key)
    created = client.responses.create(model="llama", input="Hello.", store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model="llama", input="More.", previous_response_id=created.id)
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "previous_response_id"


def test_a_translated_provider_continues_the_conversation(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    client = stack.client(stack.new_team("translated").key)
    first = client.responses.create(model="llama", instructions="Be terse.", input="My name is Ada.")
    second = client.responses.create(
        model="llama", instructions="Be kind.", input="What is my name?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    # the previous instructions are not carried over; its input and output are
    assert last_sent(upstream)["messages"] == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": [{"type": "text", "text": "My name is Ada."}]},  # as stored
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"},
    ]
    third = client.responses.create(model="claude", input="Spell it.", previous_response_id=second.id)
    sent = last_sent(upstream)  # on to Anthropic: the whole chain, whichever provider answered it
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert client.responses.retrieve(third.id).previous_response_id == second.id
    assert [i.id for i in client.responses.input_items.list(third.id).data] != []  # its own input only
    assert len(client.responses.input_items.list(third.id).data) == 1


def test_a_streamed_response_is_continued_at_once(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    client = stack.client(stack.new_team("streamed").key)
    for _ in range(5):  # the follow-up goes out the moment the stream's last event is read
        with client.responses.stream(model="llama", input="Count to three.") as stream:
            streamed = stream.get_final_response()
        assert streamed.store is True
        follow_up = client.responses.create(model="llama", input="Again.", previous_response_id=streamed.id)
        assert follow_up.previous_response_id == streamed.id
        assert last_sent(upstream)["messages"][1] == {"role": "assistant", "content": streamed.output_text}
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text


def test_a_native_upstream_is_passed_its_own_and_given_the_conversation_of_others(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    team = stack.new_team("native")
    client = stack.client(team.key, default_headers=PINNED)
    first = client.responses.create(model="gpt", input="Hello.")
    assert client.responses.retrieve(first.id).output_text == first.output_text  # the gateway's copy
    client.responses.create(model="gpt", input="More.", previous_response_id=first.id)
    assert last_sent(upstream)["previous_response_id"] == first.id  # the upstream stores it
    assert last_sent(upstream)["input"] == "More."
    with client.responses.stream(model="gpt", input="Count to three.") as stream:
        streamed = stream.get_final_response()
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text

    unpinned = stack.client(team.key)
    unpinned.responses.create(model="gpt-azure", input="More.", previous_response_id=first.id)
    sent = last_sent(upstream)  # another upstream never saw it: the conversation, without ids
    assert "previous_response_id" not in sent
    assert sent["input"][0] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hello."}],
    }
    assert sent["input"][1]["role"] == "assistant" and "id" not in sent["input"][1]
    assert sent["input"][-1] == {"role": "user", "content": "More."}

    translated = stack.client(stack.new_team("native-llama").key)
    llama = translated.responses.create(model="llama", input="Hi.")
    translated.responses.create(model="gpt", input="Go on.", previous_response_id=llama.id)
    assert "previous_response_id" not in last_sent(upstream)  # openai-us never saw it either


def test_another_teams_response_is_a_404_like_a_missing_one(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    alice, bob = stack.new_team("alice"), stack.new_team("bob")
    created = stack.client(alice.key).responses.create(model="llama", input="A secret.")
    sent_before = len(upstream.requests())
    http = httpx.Client(base_url=stack.gateway.base_url, headers={"authorization": f"Bearer {bob.key}"})
    with http:
        for method, path in (
            ("GET", "/v1/responses/{}"),
            ("DELETE", "/v1/responses/{}"),
            ("GET", "/v1/responses/{}/input_items"),
        ):
            theirs = http.request(method, path.format(created.id))
            missing = http.request(method, path.format("resp_missing"))
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json() == {
                "error": {**missing.json()["error"], "message": theirs.json()["error"]["message"]}
            }
            assert theirs.json()["error"]["message"] == missing.json()["error"]["message"].replace(
                "resp_missing", created.id
            )
        for model in ("llama", "gpt"):
            continued = http.post(
                "/v1/responses",
                json={"model": model, "input": "Tell me.", "previous_response_id": created.id},
                headers=PINNED if model == "gpt" else {},
            )
            assert continued.status_code == 404
            assert continued.json()["error"]["code"] == "previous_response_not_found"
    assert len(upstream.requests()) == sent_before  # nothing of Bob's went upstream
    assert stack.client(alice.key).responses.retrieve(created.id).id == created.id  # still Alice's


def test_input_tokens_counts_the_conversation(stack: ResponsesStack, upstream: RunningUpstream) -> None:
    client = stack.client(stack.new_team("tokens").key)
    first = client.responses.create(model="llama", input="Tell me a long story about the sea and the sky.")
    alone = client.responses.input_tokens.with_raw_response.count(model="llama", input="And then?")
    assert alone.headers["x-gateway-token-count"] == "estimated"
    continued = client.responses.input_tokens.count(
        model="llama", input="And then?", previous_response_id=first.id
    )
    assert continued.object == "response.input_tokens"
    assert continued.input_tokens > alone.parse().input_tokens > 0
    assert client.responses.input_tokens.count(input="And then?").input_tokens == alone.parse().input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(model="llama", input="x", previous_response_id="resp_missing")


def test_an_agents_sdk_run_chains_by_previous_response_id(
    stack: ResponsesStack, upstream: RunningUpstream
) -> None:
    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    team = stack.new_team("agents")
    upstream.set_behaviour(call_tool="get_weather", call_arguments={"city": "Paris"})
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        calls.append(city)
        return f"Sunny in {city}."

    async def run() -> tuple[Any, Any]:
        client = openai.AsyncOpenAI(base_url=stack.gateway.base_url + "/v1", api_key=team.key, max_retries=0)
        agent = Agent(
            name="forecaster",
            instructions="Answer with the weather.",
            model=OpenAIResponsesModel(model="llama", openai_client=client),
            tools=[get_weather],
        )
        config = RunConfig(tracing_disabled=True)
        first = await Runner.run(
            agent, "What is the weather in Paris?", run_config=config, previous_response_id=None
        )
        second = await Runner.run(
            agent, "And tomorrow?", run_config=config, previous_response_id=first.last_response_id
        )
        # chaining from the first turn on, as `auto_previous_response_id` asks
        third = await Runner.run(agent, "And in Rome?", run_config=config, auto_previous_response_id=True)
        assert third.final_output
        await client.close()
        return first, second

    first, second = asyncio.run(run())
    assert calls == ["Paris", "Paris", "Paris"]  # one tool turn in each run
    assert isinstance(first.final_output, str) and first.final_output
    assert second.final_output
    bodies = [r["body"] for r in upstream.requests()]
    assert len(bodies) == 6  # each run: the tool call, then the answer to its output
    # the answer turns were sent with previous_response_id and only the tool's output; the gateway
    # rebuilt the conversation: the question, the call, its output
    roles = [[m["role"] for m in body["messages"]] for body in bodies]
    assert roles[1] == ["system", "user", "assistant", "tool"]
    assert roles[2] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert roles[3] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert bodies[3]["messages"][-1]["content"] == "Sunny in Paris."
    assert [m["role"] for m in bodies[5]["messages"]] == ["system", "user", "assistant", "tool"]
