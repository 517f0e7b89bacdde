"""The requests Claude Code 2.1.332 sends (tests/fixtures/clients/claude_code, recorded from
`claude -p`) replayed through the gateway's Messages API, as Claude Code sends them
(`/v1/messages?beta=true`, its `anthropic-beta` header, a streamed answer): passed through to an
Anthropic-kind provider, the body and the beta header as sent; translated for OpenAI-compatible
and Azure providers, the system turns where they stood and what changes nothing dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.stacks.messages import MessagesStack, messages_stack
from tests.support.gateway import Team
from tests.support.upstream import RunningUpstream, fresh

CLAUDE_CODE = Path(__file__).resolve().parents[1] / "fixtures" / "clients" / "claude_code"
SHAPES = sorted(path.stem for path in CLAUDE_CODE.glob("*.json"))
# alias -> the upstream path its requests land on
NATIVE = {"claude": "/v1/messages"}
TRANSLATED = {"gpt": "/v1/chat/completions", "gpt-azure": "/openai/deployments/azure-gpt/chat/completions"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    yield from messages_stack(tmp_path_factory.mktemp("claude-code"))


@pytest.fixture(scope="module")
def team(stack: MessagesStack) -> Team:
    return stack.new_team("claude-code-replay")


@pytest.fixture
def upstream(stack: MessagesStack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def recorded(shape: str) -> dict[str, Any]:
    request: dict[str, Any] = json.loads((CLAUDE_CODE / f"{shape}.json").read_text())
    return request


def replay(stack: MessagesStack, team: Team, alias: str, request: dict[str, Any]) -> httpx.Response:
    """The recorded request as Claude Code sent it (its own headers, the team's key), for `alias`."""
    headers = {**request["headers"], "x-api-key": team.key}
    body = {**request["body"], "model": alias}
    return httpx.post(stack.gateway.base_url + request["path"], headers=headers, json=body, timeout=30)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The stream's events, each frame's `event:` line naming its own data's type."""
    found = []
    for frame in response.text.split("\n\n"):
        if not frame.strip():
            continue
        name, data = frame.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        found.append(event)
    return found


def received(upstream: RunningUpstream, path: str) -> dict[str, Any]:
    (request,) = [r for r in upstream.requests() if r["path"] == path]
    return request


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("alias", [*NATIVE, *TRANSLATED])
def test_each_recorded_request_is_served(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, shape: str, alias: str
) -> None:
    response = replay(stack, team, alias, recorded(shape))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    stream = events(response)
    assert stream[0]["type"] == "message_start"
    assert stream[0]["message"]["model"] == alias
    assert stream[-2]["type"] == "message_delta" and stream[-1]["type"] == "message_stop"
    assert "error" not in [event["type"] for event in stream]


@pytest.mark.parametrize("shape", SHAPES)
def test_passed_through_the_body_and_the_betas_are_the_ones_claude_code_sent(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, shape: str
) -> None:
    request = recorded(shape)

    replay(stack, team, "claude", request)

    sent = received(upstream, NATIVE["claude"])
    assert sent["body"] == {**request["body"], "model": "claude-up"}
    assert sent["headers"]["anthropic-beta"] == request["headers"]["anthropic-beta"]
    assert sent["headers"]["x-api-key"] == "upstream-secret-anthropic"


@pytest.mark.parametrize("shape", SHAPES)
def test_translated_system_turns_stand_where_they_were(
    stack: MessagesStack, team: Team, upstream: RunningUpstream, shape: str
) -> None:
    request = recorded(shape)

    replay(stack, team, "gpt", request)

    sent = received(upstream, TRANSLATED["gpt"])
    roles = [message["role"] for message in sent["body"]["messages"]]
    turns = request["body"]["messages"]
    assert roles[0] == "system"  # the top-level system prompt
    assert roles.count("system") == 1 + sum(turn["role"] == "system" for turn in turns)
    if turns[-1]["role"] == "system":
        assert roles[-1] == "system"
    names = [tool["function"]["name"] for tool in sent["body"]["tools"]]
    assert names == [tool["name"] for tool in request["body"]["tools"]]  # deferred ones offered too
    assert not {"thinking", "context_management", "output_config", "metadata"} & sent["body"].keys()
    assert "anthropic-beta" not in sent["headers"]


def test_count_tokens_takes_the_beta_query_and_forwards_the_betas(
    stack: MessagesStack, team: Team, upstream: RunningUpstream
) -> None:
    request = recorded("first_turn_unknown_model")
    body = {name: request["body"][name] for name in ("messages", "system", "tools")} | {"model": "claude"}
    headers = {**request["headers"], "x-api-key": team.key}

    response = httpx.post(
        stack.gateway.base_url + "/v1/messages/count_tokens?beta=true", headers=headers, json=body, timeout=30
    )

    assert response.status_code == 200, response.text
    assert response.headers["x-gateway-token-count"] == "upstream"
    sent = received(upstream, "/v1/messages/count_tokens")
    assert sent["headers"]["anthropic-beta"] == request["headers"]["anthropic-beta"]


@pytest.mark.parametrize(
    ("path", "key", "status", "error_type"),
    [
        ("/v1/messages?beta=true", "sk-wrong", 401, "authentication_error"),
        ("/v1/messages/count_tokens?beta=true", "sk-wrong", 401, "authentication_error"),
        ("/v1/messages/nothing?beta=true", None, 404, "not_found_error"),
    ],
)
def test_errors_are_in_anthropics_envelope(
    stack: MessagesStack, team: Team, path: str, key: str | None, status: int, error_type: str
) -> None:
    request = recorded("first_turn_known_model")
    headers = {**request["headers"], "x-api-key": key or team.key}

    response = httpx.post(stack.gateway.base_url + path, headers=headers, json=request["body"], timeout=30)

    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type and body["error"]["message"]
