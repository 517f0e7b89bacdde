"""What current Messages clients send (Claude Code, the anthropic SDK's beta API): system turns
inside `messages`, `context_management`, per-turn `output_config`, `defer_loading` tools and the
`anthropic-beta` header; forwarded to Anthropic, translated or dropped for chat, refused where
dropping would change the answer."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gateway.dialects.messages.adapter import TranslatedMessagesAdapter
from gateway.dialects.messages.betas import with_betas
from gateway.dialects.messages.native import NativeMessagesAdapter
from gateway.errors import InvalidRequest
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import ProviderKind
from tests.unit.dialects.messages.calls import UPSTREAM_MODEL, messages_body, messages_call
from tests.unit.providers.calls import provider

SELF_HOSTED = provider(ProviderKind.OPENAI, base_url="http://vllm.internal:8000/v1")
OPENAI_API = provider(ProviderKind.OPENAI, base_url="https://api.openai.com/v1")
ANTHROPIC = provider(ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com")
SCHEMA = {"type": "object", "properties": {}}
BETAS = "context-management-2025-06-27, advanced-tool-use-2025-11-20"


def chat_sent(body: dict[str, Any], settings: Any = SELF_HOSTED) -> dict[str, Any]:
    adapter = TranslatedMessagesAdapter(OpenAIAdapter(), settings)
    request = adapter.build_request(messages_call(body), settings, settings.urls[0])
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


def native_sent(body: dict[str, Any], betas: str | None = None, settings: Any = ANTHROPIC) -> Any:
    call = dataclasses.replace(messages_call(body), anthropic_beta=betas)
    return NativeMessagesAdapter().build_request(call, settings, settings.urls[0])


SYSTEM_TURNS = [
    {"role": "user", "content": "first"},
    {"role": "system", "content": "Only for the first question.", "clear_at": "next_user_message"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "second"},
    {
        "role": "system",
        "content": [{"type": "text", "text": "Answer briefly."}],
        "output_config": {"effort": "low"},
    },
]


def test_system_turns_stand_where_they_are_and_hidden_ones_are_left_out() -> None:
    sent = chat_sent(messages_body(system="Be kind.", messages=SYSTEM_TURNS))
    assert sent["messages"] == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
        {"role": "system", "content": "Answer briefly."},
    ]


def test_a_clear_at_turn_with_no_later_user_turn_is_shown() -> None:
    turns = [
        {"role": "user", "content": "q"},
        {"role": "system", "content": "now", "clear_at": "next_user_message"},
    ]
    assert chat_sent(messages_body(messages=turns))["messages"][-1] == {"role": "system", "content": "now"}


def test_openai_api_gets_system_turns_as_developer_messages() -> None:
    sent = chat_sent(messages_body(messages=SYSTEM_TURNS), OPENAI_API)
    assert sent["messages"][-1] == {"role": "developer", "content": "Answer briefly."}


def test_what_changes_nothing_for_chat_is_dropped() -> None:
    tools = [
        {"name": "search", "input_schema": SCHEMA},
        {"name": "later", "description": "deferred", "input_schema": SCHEMA, "defer_loading": True},
    ]
    turns = [
        {"role": "user", "content": "q"},
        {
            "role": "system",
            "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "later"}}],
        },
    ]
    body = messages_body(
        messages=turns,
        tools=tools,
        thinking={"type": "adaptive", "display": "omitted"},
        output_config={"effort": "high"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    )
    sent = chat_sent(body)
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["search", "later"]
    assert all("defer_loading" not in json.dumps(tool) for tool in sent["tools"])
    assert sent["messages"] == [{"role": "user", "content": "q"}]
    assert not {"thinking", "output_config", "context_management", "reasoning_effort"} & set(sent)


def test_a_tool_reference_in_a_tool_result_names_the_tool() -> None:
    turns = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "tool_reference", "tool_name": "later"}],
                }
            ],
        },
    ]
    sent = chat_sent(messages_body(messages=turns, tools=[{"name": "search", "input_schema": SCHEMA}]))
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "t1", "content": "Tool loaded: later"}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
            "context_management.edits[0]",
        ),
        (
            {
                "context_management": {
                    "edits": [{"type": "clear_thinking_20251015"}, {"type": "compact_20260112"}]
                }
            },
            "context_management.edits[1]",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "system",
                        "content": [
                            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "x"}}
                        ],
                    },
                ]
            },
            "messages[1].content[0]",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "system",
                        "content": [
                            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {}}}
                        ],
                    },
                ]
            },
            "messages[1].content[0]",
        ),
    ],
)
def test_what_would_change_the_answer_is_refused_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        chat_sent(messages_body(**fields))
    assert (refused.value.status, refused.value.param, refused.value.code) == (
        400,
        param,
        "unsupported_parameter",
    )


def test_anthropic_gets_every_field_and_the_clients_betas() -> None:
    body = messages_body(
        messages=SYSTEM_TURNS,
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        tools=[{"name": "later", "input_schema": SCHEMA, "defer_loading": True}],
    )
    request = native_sent(body, BETAS)
    assert json.loads(request.content) == {**body, "model": UPSTREAM_MODEL}
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27,advanced-tool-use-2025-11-20"


def test_without_a_beta_header_none_is_sent() -> None:
    assert "anthropic-beta" not in native_sent(messages_body()).headers


def test_the_providers_allow_list_and_own_betas() -> None:
    settings = provider(
        ProviderKind.ANTHROPIC,
        base_url="https://api.anthropic.com",
        headers={"Anthropic-Beta": "files-api-2025-04-14"},
        anthropic_betas=("context-management-2025-06-27",),
    )
    headers = native_sent(messages_body(), BETAS + ",files-api-2025-04-14", settings).headers
    assert [name for name in headers if name.lower() == "anthropic-beta"] == ["anthropic-beta"]
    assert headers["anthropic-beta"] == "files-api-2025-04-14,context-management-2025-06-27"


def test_an_empty_allow_list_forwards_none_and_junk_is_left_out() -> None:
    closed = provider(ProviderKind.ANTHROPIC, anthropic_betas=())
    assert with_betas({"x-api-key": "k"}, BETAS, closed) == {"x-api-key": "k"}
    assert with_betas({}, "ok-1, bad name, ,\u00e9", ANTHROPIC) == {"anthropic-beta": "ok-1"}
