"""What replies tell the client's tools, through the OpenAI SDK against `gateway serve` in front of
`gateway mock-upstream`: `model` is the alias asked for, the upstream's model and the exact cost
are in headers, `usage.cost` is the usage record's cost; the client's X-Request-ID is kept on its
record, and its W3C traceparent reaches the upstream."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack
from tests.support.gateway import Team
from tests.support.upstream import RunningUpstream

MESSAGES = [{"role": "user", "content": "name three colours"}]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def team(stack: Stack) -> Team:
    return stack.new_team("reply-fields")


def record(stack: Stack, team: Team, request_id: str) -> dict[str, Any]:
    """The usage record of one request, once the writer has stored it."""
    for _ in range(60):
        rows = stack.admin.get("/admin/usage/events", params={"team_id": team.id, "limit": "1000"}).json()
        found = [row for row in rows["data"] if row["request_id"] == request_id]
        if found:
            return found[0]  # type: ignore[no-any-return]
        time.sleep(0.25)
    raise AssertionError(f"no usage record for {request_id}")


def test_a_chat_completion_names_the_alias_and_costs_what_its_record_says(stack: Stack, team: Team) -> None:
    raw = stack.client(team.key).chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)
    completion = raw.parse()

    assert completion.model == "chat"
    assert raw.headers["x-gateway-upstream-model"] == "upstream-chat"
    assert completion.usage is not None
    cost = (completion.usage.model_extra or {})["cost"]
    assert cost == raw.headers["x-gateway-cost"]
    assert "E" not in cost
    stored = record(stack, team, raw.headers["x-request-id"])
    assert Decimal(cost) == Decimal(stored["cost"]) > 0
    assert stored["model"] == "chat" and stored["upstream_model"] == "upstream-chat"


def test_a_stream_names_the_alias_in_every_chunk_and_its_usage_chunk_carries_the_cost(
    stack: Stack, team: Team
) -> None:
    raw = stack.client(team.key).chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert raw.headers["x-gateway-upstream-model"] == "upstream-chat"
    assert "x-gateway-cost" not in raw.headers  # a stream's headers go out before its cost is known
    chunks = list(raw.parse())

    assert chunks and {chunk.model for chunk in chunks} == {"chat"}
    usage = chunks[-1].usage
    assert usage is not None
    stored = record(stack, team, raw.headers["x-request-id"])
    assert Decimal((usage.model_extra or {})["cost"]) == Decimal(stored["cost"]) > 0


def test_completions_and_embeddings_name_the_alias_and_carry_the_cost(stack: Stack, team: Team) -> None:
    client = stack.client(team.key)
    completion = client.completions.with_raw_response.create(model="chat", prompt="Say hi", max_tokens=5)
    embedding = client.embeddings.with_raw_response.create(model="embed", input=["a", "b"])
    text_stream = list(client.completions.create(model="chat", prompt="Say hi", max_tokens=5, stream=True))

    assert completion.parse().model == "chat" and embedding.parse().model == "embed"
    assert {chunk.model for chunk in text_stream} == {"chat"}
    assert embedding.headers["x-gateway-upstream-model"] == "upstream-embed"
    for raw in (completion, embedding):
        usage = raw.parse().usage
        assert usage is not None
        stored = record(stack, team, raw.headers["x-request-id"])
        assert Decimal((usage.model_extra or {})["cost"]) == Decimal(raw.headers["x-gateway-cost"])
        assert Decimal(raw.headers["x-gateway-cost"]) == Decimal(stored["cost"]) > 0


def test_azure_answers_name_the_alias(stack: Stack, team: Team) -> None:
    raw = stack.client(team.key).chat.completions.with_raw_response.create(
        model="chat-azure", messages=MESSAGES
    )
    assert raw.parse().model == "chat-azure"
    assert raw.headers["x-gateway-upstream-model"] == "azure-chat"
    assert Decimal(raw.headers["x-gateway-cost"]) == Decimal(
        record(stack, team, raw.headers["x-request-id"])["cost"]
    )


def test_an_upstream_error_names_the_upstream_model(
    stack: Stack, team: Team, fresh_upstream: RunningUpstream
) -> None:
    fresh_upstream.set_behaviour(fail_rate=1, fail_status=400)
    reply = httpx.post(
        stack.base_url + "/chat/completions",
        headers={"authorization": f"Bearer {team.key}"},
        json={"model": "chat", "messages": MESSAGES},
    )
    assert reply.status_code == 400
    assert reply.headers["x-gateway-upstream-model"] == "upstream-chat"
    assert "x-gateway-cost" not in reply.headers


def test_the_clients_request_id_lands_on_its_record(stack: Stack, team: Team) -> None:
    client = stack.client(team.key, default_headers={"X-Request-ID": "eval-run-3/item-0042"})
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)

    gateway_id = raw.headers["x-request-id"]
    assert gateway_id.startswith("req_")  # the gateway's own id answers
    assert record(stack, team, gateway_id)["client_request_id"] == "eval-run-3/item-0042"


def test_a_request_id_that_is_not_printable_ascii_is_not_kept(stack: Stack, team: Team) -> None:
    client = stack.client(team.key, default_headers={"X-Request-ID": "x" * 129})
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)
    assert raw.parse().choices
    assert record(stack, team, raw.headers["x-request-id"])["client_request_id"] is None


@pytest.mark.parametrize("model", ["chat", "chat-azure", "claude"])
def test_a_traceparent_reaches_the_upstream_for_every_provider_kind(
    stack: Stack, team: Team, fresh_upstream: RunningUpstream, model: str
) -> None:
    client = stack.client(
        team.key, default_headers={"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}
    )
    raw = client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES)

    assert raw.parse().choices
    [sent] = fresh_upstream.requests()
    assert sent["headers"]["traceparent"] == TRACEPARENT
    assert sent["headers"]["tracestate"] == "congo=t61rcWkgMzE"
    assert raw.headers["x-gateway-upstream-model"]


def test_an_invalid_traceparent_does_not_reach_the_upstream(
    stack: Stack, team: Team, fresh_upstream: RunningUpstream
) -> None:
    headers = {"traceparent": TRACEPARENT.upper(), "tracestate": "congo=t61rcWkgMzE"}
    stack.client(team.key, default_headers=headers).chat.completions.create(model="chat", messages=MESSAGES)

    [sent] = fresh_upstream.requests()
    assert "traceparent" not in sent["headers"] and "tracestate" not in sent["headers"]
