"""The requests Codex CLI 0.171 sends (tests/fixtures/clients/codex_cli, recorded through the
gateway) replayed through the gateway: passed through to an upstream serving the Responses API,
whose body is the one Codex sent, and translated to chat (a self-hosted server) and on to
Anthropic, where the namespace tool is flattened, Codex's web_search (cached, or live with the
sandbox off) dropped and named in `x-gateway-dropped-tools`, and a call of a namespace function comes back in its namespace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.stacks.responses import ResponsesStack, responses_stack
from tests.support.gateway import Team
from tests.support.upstream import RunningUpstream, fresh

CODEX = Path(__file__).resolve().parents[1] / "fixtures" / "clients" / "codex_cli"
SHAPES = sorted(path.stem for path in CODEX.glob("*.json"))
# alias -> the upstream path its requests land on
NATIVE = {"gpt": "/us/v1/responses"}
TRANSLATED = {"llama": "/v1/chat/completions", "claude": "/v1/messages"}
PINNED = {"x-gateway-provider": "openai-us"}  # `gpt` has a second deployment
DROPPED = "x-gateway-dropped-tools"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResponsesStack]:
    yield from responses_stack(tmp_path_factory.mktemp("codex"))


@pytest.fixture(scope="module")
def team(stack: ResponsesStack) -> Team:
    return stack.new_team("codex-replay")


@pytest.fixture
def upstream(stack: ResponsesStack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def recorded(shape: str) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = json.loads((CODEX / f"{shape}.json").read_text())["requests"]
    return requests


def replay(stack: ResponsesStack, team: Team, alias: str, request: dict[str, Any]) -> httpx.Response:
    """The recorded request as Codex sent it (its own headers, the team's key), for `alias`."""
    headers = {**request["headers"], "authorization": f"Bearer {team.key}"}
    if alias in NATIVE:
        headers |= PINNED
    body = {**request["body"], "model": alias}
    return httpx.post(stack.gateway.base_url + request["path"], headers=headers, json=body, timeout=30)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The stream's events, each checked to name its type on the `event:` line too."""
    found = []
    for frame in response.text.split("\n\n"):
        if not frame.strip():
            continue
        name, data = frame.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        found.append(event)
    return found


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("alias", [*NATIVE, *TRANSLATED])
def test_each_recorded_request_is_served(
    stack: ResponsesStack, team: Team, upstream: RunningUpstream, shape: str, alias: str
) -> None:
    for request in recorded(shape):
        response = replay(stack, team, alias, request)

        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = events(response)
        assert [event["sequence_number"] for event in stream] == list(range(len(stream)))
        assert stream[0]["type"] == "response.created"
        assert stream[-1]["type"] == "response.completed"
        assert stream[-1]["response"]["model"] == alias
        if alias in NATIVE:
            assert DROPPED not in response.headers  # OpenAI runs web_search itself
        else:
            assert response.headers[DROPPED] == "web_search"


@pytest.mark.parametrize("shape", SHAPES)
def test_passed_through_the_body_is_the_one_codex_sent(
    stack: ResponsesStack, team: Team, upstream: RunningUpstream, shape: str
) -> None:
    request = recorded(shape)[0]

    replay(stack, team, "gpt", request)

    (received,) = [r for r in upstream.requests() if r["path"] == NATIVE["gpt"]]
    # prompt_cache_key goes as the provider's cache_hints say: stripped at a server not api.openai.com
    sent = {name: value for name, value in request["body"].items() if name != "prompt_cache_key"}
    assert received["body"] == {**sent, "model": "gpt-upstream"}
    assert "web_search" in [tool["type"] for tool in received["body"]["tools"]]


@pytest.mark.parametrize("shape", SHAPES)
def test_translated_the_namespace_is_flattened_and_web_search_left_out(
    stack: ResponsesStack, team: Team, upstream: RunningUpstream, shape: str
) -> None:
    request = recorded(shape)[0]

    replay(stack, team, "llama", request)

    (received,) = [r for r in upstream.requests() if r["path"] == TRANSLATED["llama"]]
    names = [tool["function"]["name"] for tool in received["body"]["tools"]]
    assert "multi_agent_v1__close_agent" in names and "exec_command" in names
    assert all(tool["type"] == "function" for tool in received["body"]["tools"])
    assert not {"include", "store", "client_metadata", "reasoning"} & received["body"].keys()


def test_a_call_of_a_namespace_function_reaches_codex_in_its_namespace(
    stack: ResponsesStack, team: Team, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(call_tool="multi_agent_v1__close_agent", call_arguments={"target": "agent-1"})

    response = replay(stack, team, "llama", recorded("first_turn")[0])

    done = [event["item"] for event in events(response) if event["type"] == "response.output_item.done"]
    assert [(item["type"], item.get("namespace"), item["name"]) for item in done] == [
        ("function_call", "multi_agent_v1", "close_agent")
    ]
    assert json.loads(done[0]["arguments"]) == {"target": "agent-1"}


def test_a_live_web_search_from_another_client_is_refused_naming_it(
    stack: ResponsesStack, team: Team, upstream: RunningUpstream
) -> None:
    request = recorded("first_turn_full_access")[0]
    body = {name: value for name, value in request["body"].items() if name != "client_metadata"}
    where = next(i for i, tool in enumerate(body["tools"]) if tool["type"] == "web_search")

    response = replay(stack, team, "llama", {**request, "body": body})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == f"tools[{where}].type"
    assert error["code"] == "unsupported_parameter"
    assert f"tools[{where}]" in error["message"] and "web_search" in error["message"]
    assert not upstream.requests()
