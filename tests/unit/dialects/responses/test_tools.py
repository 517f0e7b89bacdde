"""Responses tools at a provider served through its chat API: namespace tools flattened and their
calls answered with `namespace` and `name` apart (whole and streamed), built-in tools dropped when
optional or when the provider says so and refused otherwise, and the header naming what was
dropped. The requests are those Codex CLI sends (tests/fixtures/clients/codex_cli)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog.testing
from openai.types.responses import Response as SDKResponse

from gateway.dialects.endpoints import endpoint_adapter
from gateway.dialects.responses.adapter import TranslatedResponsesAdapter, dropped_tools_header
from gateway.dialects.responses.tools import DROPPED_HEADER
from gateway.errors import InvalidRequest
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.schemas.responses import ResponsesRequest
from gateway.settings import ConfigError, load_catalog
from tests.support.openapi import validate
from tests.unit.providers.calls import FIXTURES, provider

SELF_HOSTED = "http://vllm.internal:8000/v1"
VLLM = provider(base_url=SELF_HOSTED)
DROPPING = provider(base_url=SELF_HOSTED, responses_builtin_tools="drop")
OPENAI = provider(base_url="https://api.openai.com/v1")
CODEX = FIXTURES / "clients" / "codex_cli"

FUNCTION = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {"type": "function", "name": "close_agent", "description": "Close an agent.", "parameters": {}},
        {"type": "function", "name": "wait_agent", "parameters": {"type": "object"}},
    ],
}
CACHED_SEARCH = {"type": "web_search", "external_web_access": False}


def codex_body(name: str, index: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(Path(CODEX / f"{name}.json").read_text())["requests"][index]["body"]
    return body


def adapter(*, drop: bool = False) -> TranslatedResponsesAdapter:
    numbers = itertools.count(1)
    return TranslatedResponsesAdapter(
        OpenAIAdapter(),
        drop_builtin_tools=drop,
        clock=lambda: 1700000000.0,
        new_id=lambda prefix: f"{prefix}{next(numbers)}",
    )


def responses_call(body: dict[str, Any]) -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.RESPONSES,
        body=body,
        upstream_model="upstream-model",
        stream=bool(body.get("stream")),
        client_wants_usage=False,
        team_id="team-1",
    )


def sent(body: dict[str, Any], *, drop: bool = False) -> dict[str, Any]:
    request = adapter(drop=drop).build_request(responses_call(body), VLLM, SELF_HOSTED)
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


def body_with(*tools: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "llama", "input": "hi", "tools": list(tools), **fields}


def test_a_namespace_becomes_one_function_per_member_led_by_its_description() -> None:
    chat = sent(body_with(FUNCTION, NAMESPACE))

    names = [tool["function"]["name"] for tool in chat["tools"]]
    assert names == ["exec_command", "multi_agent_v1__close_agent", "multi_agent_v1__wait_agent"]
    close = chat["tools"][1]["function"]
    assert close["description"] == "Tools for spawning and managing sub-agents.\n\nClose an agent."
    assert close["parameters"] == {}


def test_a_namespace_call_sent_back_is_the_flattened_call() -> None:
    body = body_with(
        NAMESPACE,
        input=[
            {"role": "user", "content": "close it"},
            {"type": "function_call", "call_id": "c1", "namespace": "multi_agent_v1", "name": "close_agent",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "closed"},
        ],
    )  # fmt: skip

    chat = sent(body)

    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"


def test_a_tool_choice_naming_a_namespace_function_names_its_flattened_function() -> None:
    choice = {"type": "function", "namespace": "multi_agent_v1", "name": "wait_agent"}

    chat = sent(body_with(NAMESPACE, tool_choice=choice))

    assert chat["tool_choice"] == {"type": "function", "function": {"name": "multi_agent_v1__wait_agent"}}


def chat_answer(*names: str) -> bytes:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": '{"target": "a"}'}}
        for i, name in enumerate(names)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    ).encode()


def test_a_call_of_a_flattened_function_comes_back_in_its_namespace() -> None:
    call = responses_call(body_with(FUNCTION, NAMESPACE, CACHED_SEARCH))

    answer = adapter().parse_response(call, chat_answer("multi_agent_v1__close_agent", "exec_command"))
    response = json.loads(answer.body)

    first, second = response["output"]
    assert (first["namespace"], first["name"], first["call_id"]) == (
        "multi_agent_v1",
        "close_agent",
        "call_0",
    )
    assert "namespace" not in second and second["name"] == "exec_command"
    assert [tool["type"] for tool in response["tools"]] == ["function", "namespace"]  # web_search left out
    assert [tool["name"] for tool in response["tools"][1]["tools"]] == ["close_agent", "wait_agent"]
    validate("Response", response)
    SDKResponse.model_validate(response)


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps(
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    ).encode()


def test_a_streamed_call_of_a_flattened_function_comes_back_in_its_namespace() -> None:
    call = responses_call(body_with(NAMESPACE, stream=True))
    stream = adapter().stream_translator(call)
    opening = {"index": 0, "id": "call_9", "type": "function",
               "function": {"name": "multi_agent_v1__wait_agent", "arguments": ""}}  # fmt: skip
    frames: list[bytes] = []
    for data in (
        chunk({"role": "assistant", "tool_calls": [opening]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"targets": []}'}}]}),
        chunk({}, "tool_calls"),
    ):
        frames += stream.feed(data)
    frames += stream.finish()
    events = [json.loads(frame.split(b"\ndata: ", 1)[1]) for frame in frames]

    by_type = {event["type"]: event for event in events}
    added = by_type["response.output_item.added"]["item"]
    done = by_type["response.output_item.done"]["item"]
    assert (added["namespace"], added["name"]) == ("multi_agent_v1", "wait_agent")
    assert (done["namespace"], done["name"], done["arguments"]) == (
        "multi_agent_v1",
        "wait_agent",
        '{"targets": []}',
    )
    assert by_type["response.function_call_arguments.done"]["name"] == "wait_agent"
    assert by_type["response.completed"]["response"]["output"] == [done]


def test_an_optional_web_search_is_dropped() -> None:
    chat = sent(body_with(FUNCTION, CACHED_SEARCH))

    assert [tool["function"]["name"] for tool in chat["tools"]] == ["exec_command"]


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "web_search", "external_web_access": True},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},
        {"type": "local_shell"},
    ],
)
def test_a_builtin_tool_the_client_needs_is_refused_naming_its_index(tool: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as refused:
        sent(body_with(FUNCTION, tool))

    assert refused.value.param == "tools[1].type"
    assert f"'{tool['type']}'" in str(refused.value)


def test_a_provider_set_to_drop_drops_every_builtin_tool() -> None:
    body = body_with(FUNCTION, {"type": "file_search"}, {"type": "web_search"}, CACHED_SEARCH)

    chat = sent(body, drop=True)

    assert [tool["function"]["name"] for tool in chat["tools"]] == ["exec_command"]


def test_only_builtin_tools_leave_no_tools_at_all() -> None:
    assert "tools" not in sent(body_with(CACHED_SEARCH))


@pytest.mark.parametrize(
    ("tools", "where"),
    [
        ([{"type": "custom", "name": "apply_patch"}], "tools[0].type"),
        ([{**NAMESPACE, "tools": [{"type": "custom", "name": "free"}]}], "tools[0].tools[0].type"),
        ([{"type": "namespace", "description": "x", "tools": [FUNCTION]}], "tools[0].name"),
        ([{"type": "namespace", "name": "n", "description": "x", "tools": []}], "tools[0].tools"),
    ],
)
def test_what_cannot_be_flattened_is_refused_where_it_is(tools: list[Any], where: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        sent(body_with(*tools))

    assert refused.value.param == where


def typed(body: dict[str, Any]) -> ResponsesRequest:
    return msgspec.convert(body, ResponsesRequest)


def test_the_header_names_the_dropped_tools_at_a_translated_provider_only() -> None:
    request = typed(body_with(FUNCTION, CACHED_SEARCH, {"type": "file_search"}, CACHED_SEARCH))
    optional_only = typed(body_with(FUNCTION, CACHED_SEARCH))

    assert dropped_tools_header(optional_only, VLLM) == {DROPPED_HEADER: "web_search"}
    assert dropped_tools_header(request, DROPPING) == {DROPPED_HEADER: "web_search, file_search"}
    assert dropped_tools_header(request, OPENAI) == {}  # passed through: OpenAI runs them
    assert dropped_tools_header(typed(body_with(FUNCTION)), VLLM) == {}


CODEX_SHAPES = sorted(path.stem for path in CODEX.glob("*.json"))


@pytest.mark.parametrize("name", CODEX_SHAPES)
def test_codex_requests_translate_whole(name: str) -> None:
    body = codex_body(name)

    chat = sent(body)

    names = [tool["function"]["name"] for tool in chat["tools"]]
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names
    assert not {"include", "store", "client_metadata", "reasoning", "text"} & chat.keys()
    assert chat["stream"] is True and chat["parallel_tool_calls"] is True
    assert chat["messages"][0]["role"] == "system"  # Codex's developer message
    assert dropped_tools_header(typed(body), VLLM) == {DROPPED_HEADER: "web_search"}


def test_codex_default_web_search_is_dropped_live_too_and_another_clients_is_refused() -> None:
    body = codex_body("first_turn_full_access")
    where = next(i for i, tool in enumerate(body["tools"]) if tool["type"] == "web_search")
    assert body["tools"][where] == {"type": "web_search", "external_web_access": True}

    assert "web_search" not in json.dumps(sent(body)["tools"])
    without_codex = {name: value for name, value in body.items() if name != "client_metadata"}
    with pytest.raises(InvalidRequest) as refused:
        sent(without_codex)
    assert refused.value.param == f"tools[{where}].type"
    assert dropped_tools_header(typed(without_codex), DROPPING) == {DROPPED_HEADER: "web_search"}


def test_codex_reasoning_effort_is_sent_and_its_summary_is_not() -> None:
    body = codex_body("reasoning_effort")
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"}

    assert sent(body)["reasoning_effort"] == "high"


def test_codex_sends_back_the_namespace_of_the_call_it_was_answered() -> None:
    items = codex_body("namespace_call_turn")["input"]
    call = next(item for item in items if item.get("type") == "function_call")
    assert (call["namespace"], call["name"]) == ("multi_agent_v1", "close_agent")

    messages = sent(codex_body("namespace_call_turn"))["messages"]

    calls = [c for m in messages for c in m.get("tool_calls", ())]
    assert [c["function"]["name"] for c in calls] == ["multi_agent_v1__close_agent"]
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == call["call_id"]


def test_fields_a_chat_upstream_cannot_honour_are_dropped_not_refused() -> None:
    body = body_with(
        FUNCTION,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low", "summary": "auto"},
        text={"verbosity": "low"},
        store=False,
        service_tier="priority",
        client_metadata={"session_id": "s"},
        prompt_cache_key="session-1",
        parallel_tool_calls=False,
        stream=True,
    )

    chat = sent(body)

    assert chat["reasoning_effort"] == "low" and chat["parallel_tool_calls"] is False
    assert not {"include", "reasoning", "text", "store", "service_tier", "client_metadata"} & chat.keys()


def test_the_log_line_names_the_tools_and_the_provider_only() -> None:
    with structlog.testing.capture_logs() as logs:
        dropped_tools_header(typed(codex_body("first_turn")), VLLM)

    (line,) = [entry for entry in logs if entry["event"] == "responses_tools_dropped"]
    assert line == {"event": "responses_tools_dropped", "log_level": "info", "tools": ["web_search"],
                    "provider": VLLM.name}  # fmt: skip


def test_the_provider_setting_reaches_the_translating_adapter_and_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    line = "{name: p, kind: openai, region: r, base_url: 'http://h/v1', responses_builtin_tools: %s}"
    models = "models:\n  - {name: m, deployments: [{provider: p, model: u}]}\n"

    config.write_text(f"providers:\n  - {line % 'drop'}\n{models}")
    (loaded,) = load_catalog(config, {}).providers
    adapter = endpoint_adapter(loaded, Endpoint.RESPONSES)
    assert isinstance(adapter, TranslatedResponsesAdapter) and adapter.drop_builtin_tools
    assert not endpoint_adapter(VLLM, Endpoint.RESPONSES).drop_builtin_tools

    config.write_text(f"providers:\n  - {line % 'ignore'}\n{models}")
    with pytest.raises(ConfigError) as raised:
        load_catalog(config, {})
    assert "providers[0].responses_builtin_tools: must be refuse or drop" in str(raised.value)
