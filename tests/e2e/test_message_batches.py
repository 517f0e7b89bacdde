"""Anthropic's Message Batches end to end: the anthropic SDK's `client.messages.batches` ->
`gateway serve` -> the recording mock upstream.

A batch on an OpenAI-compatible provider (each request translated, as /v1/messages translates it)
and one on Anthropic itself: create, poll until ended, results, list; every request metered once,
with the batch's id. A wrong request refused at create in Anthropic's error envelope; a cancel of a
batch whose deployment fails (every request canceled); delete, only once ended.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse, MessageBatchSucceededResult

from tests.e2e.stacks.messages import MessagesStack, messages_stack
from tests.support.gateway import Team

pytestmark = pytest.mark.e2e

DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    yield from messages_stack(tmp_path_factory.mktemp("message-batches"))


@pytest.fixture
def team(stack: MessagesStack) -> Team:
    return stack.new_team(f"msgbatch-{secrets.token_hex(4)}")


def requests(model: str, count: int, *, prefix: str = "req") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"{prefix}-{i}",
            "params": {
                "model": model,
                "max_tokens": 8 + i,
                "system": "You are a terse assistant.",
                "messages": [{"role": "user", "content": f"question {i}"}],
            },
        }
        for i in range(count)
    ]


def ended(client: anthropic.Anthropic, batch_id: str) -> MessageBatch:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.2)
    raise AssertionError(f"the batch {batch_id} did not end within {DEADLINE_S}s")


def message_of(result: MessageBatchIndividualResponse) -> Message:
    assert isinstance(result.result, MessageBatchSucceededResult), result
    return result.result.message


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_batch_round_trip_on_a_translated_provider_and_on_anthropic(
    stack: MessagesStack, team: Team, model: str
) -> None:
    client = stack.client(team.key)
    sent = requests(model, 5)
    created = client.messages.batches.create(requests=sent)  # type: ignore[arg-type]
    assert created.type == "message_batch"
    assert created.processing_status == "in_progress"
    assert created.results_url is None
    counts = created.request_counts
    assert counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired == 5

    batch = ended(client, created.id)
    assert batch.request_counts.succeeded == 5
    assert (batch.request_counts.errored, batch.request_counts.canceled, batch.request_counts.expired) == (
        0,
        0,
        0,
    )
    assert batch.ended_at is not None and batch.results_url is not None

    results = list(client.messages.batches.results(created.id))
    assert sorted(r.custom_id for r in results) == sorted(r["custom_id"] for r in sent)
    for result in results:
        message = message_of(result)
        assert message.type == "message" and message.role == "assistant"
        assert message.content[0].type == "text" and message.content[0].text
        assert message.usage.output_tokens > 0

    listed = client.messages.batches.list(limit=10)
    assert created.id in [b.id for b in listed.data]

    # each request metered once, with the batch's id, as a Messages request
    events = stack.events(team.id, 5)
    assert len(events) == 5
    assert {e["batch_id"] for e in events} == {created.id}
    assert len({e["request_id"] for e in events}) == 5
    assert {e["endpoint"] for e in events} == {"messages"}
    assert sum(e["completion_tokens"] for e in events) == sum(
        message_of(r).usage.output_tokens for r in results
    )

    deleted = client.messages.batches.delete(created.id)
    assert (deleted.id, deleted.type) == (created.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)


def test_on_the_translated_provider_each_request_goes_upstream_as_a_chat_completion(
    stack: MessagesStack, team: Team
) -> None:
    stack.upstream.clear()
    client = stack.client(team.key)
    created = client.messages.batches.create(requests=requests("gpt", 3, prefix="tr"))  # type: ignore[arg-type]
    ended(client, created.id)
    upstream = [r for r in stack.upstream.requests() if r["path"].endswith("/chat/completions")]
    assert len(upstream) == 3
    assert all(
        r["body"]["messages"][0] == {"role": "system", "content": "You are a terse assistant."}
        for r in upstream
    )


def test_a_wrong_request_is_refused_at_create_in_anthropics_envelope(
    stack: MessagesStack, team: Team
) -> None:
    client = stack.client(team.key)
    bad = requests("gpt", 3)
    bad[1]["custom_id"] = "not an id!"
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.batches.create(requests=bad)  # type: ignore[arg-type]
    body = refused.value.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == "requests[1].custom_id"

    twice = requests("gpt", 2)
    twice[1]["custom_id"] = twice[0]["custom_id"]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.batches.create(requests=twice)  # type: ignore[arg-type]
    assert refused.value.response.json()["error"]["param"] == "requests[1].custom_id"

    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.batches.retrieve("batch_0000")
    assert missing.value.response.json()["type"] == "error"
    assert client.messages.batches.list().data == []  # nothing was created


def test_a_request_the_gateway_cannot_send_is_an_errored_result(stack: MessagesStack, team: Team) -> None:
    client = stack.client(team.key)
    sent = requests("gpt", 2)
    sent[1]["params"]["messages"] = "not a list"
    created = client.messages.batches.create(requests=sent)  # type: ignore[arg-type]
    batch = ended(client, created.id)
    assert (batch.request_counts.succeeded, batch.request_counts.errored) == (1, 1)
    results = {r.custom_id: r.result for r in client.messages.batches.results(created.id)}
    assert results["req-0"].type == "succeeded"
    errored = results["req-1"]
    assert errored.type == "errored"
    assert errored.error.type == "error"
    assert errored.error.error.type == "invalid_request_error"


def test_cancel_stops_a_batch_and_delete_waits_for_its_end(stack: MessagesStack, team: Team) -> None:
    client = stack.client(team.key)
    stack.upstream.set_behaviour(fail_rate=1.0, fail_status=503)  # the pinned deployment fails: it waits
    try:
        created = client.messages.batches.create(requests=requests("claude", 4))  # type: ignore[arg-type]
        with pytest.raises(anthropic.ConflictError):
            client.messages.batches.delete(created.id)
        cancelling = client.messages.batches.cancel(created.id)
        assert cancelling.processing_status in ("canceling", "ended")
        assert cancelling.cancel_initiated_at is not None
        batch = ended(client, created.id)
    finally:
        stack.upstream.set_behaviour()
    assert batch.request_counts.canceled == 4
    assert [r.result.type for r in client.messages.batches.results(created.id)] == ["canceled"] * 4
    assert client.messages.batches.cancel(created.id).processing_status == "ended"  # as it was
    assert client.messages.batches.delete(created.id).type == "message_batch_deleted"


def test_a_team_sees_only_its_own_message_batches_and_not_its_openai_batches(
    stack: MessagesStack, team: Team
) -> None:
    other = stack.new_team(f"msgbatch-{secrets.token_hex(4)}")
    created = stack.client(team.key).messages.batches.create(requests=requests("gpt", 1))  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError):
        stack.client(other.key).messages.batches.retrieve(created.id)
    assert stack.client(other.key).messages.batches.list().data == []
    ended(stack.client(team.key), created.id)
    # the Authorization header works too, and the page cursors
    bearer = stack.bearer_client(team.key)
    second = bearer.messages.batches.create(requests=requests("gpt", 1))  # type: ignore[arg-type]
    page = bearer.messages.batches.list(limit=1)
    assert [b.id for b in page.data] == [second.id] and page.has_more
    older = bearer.messages.batches.list(limit=1, after_id=second.id)
    assert [b.id for b in older.data] == [created.id]
    newer = bearer.messages.batches.list(limit=5, before_id=created.id)
    assert [b.id for b in newer.data] == [second.id]
    raw = httpx.get(
        f"{stack.gateway.base_url}/v1/messages/batches/{created.id}/results", headers={"x-api-key": team.key}
    )
    assert raw.status_code == 200 and raw.text.count("\n") == 1
