"""Cache-key derivation, hint-mode resolution and cache_control stripping."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import msgspec
import pytest

from gateway.providers.cache_hints import (
    apply_openai_hints,
    derive_cache_key,
    strip_cache_control,
)
from gateway.providers.openai.adapter import hint_mode
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import ProviderKind
from tests.unit.providers.calls import provider

EPH = {"type": "ephemeral"}


def chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if tools is not None:
        body["tools"] = tools
    return msgspec.convert(body, ChatCompletionRequest)


SYSTEM = {"role": "system", "content": "Shared handbook.", "cache_control": EPH}


def test_no_breakpoint_means_no_key() -> None:
    assert derive_cache_key("team", chat([{"role": "user", "content": "hi"}])) is None


def test_key_is_hex_and_ignores_everything_after_the_last_breakpoint() -> None:
    first = derive_cache_key("team", chat([SYSTEM, {"role": "user", "content": "doc 1"}]))
    second = derive_cache_key("team", chat([SYSTEM, {"role": "user", "content": "doc 2"}]))
    assert first is not None
    assert len(first) == 32
    int(first, 16)
    assert first == second


def test_key_depends_on_team_and_prefix() -> None:
    base = derive_cache_key("team", chat([SYSTEM]))
    assert derive_cache_key("other-team", chat([SYSTEM])) != base
    changed = {**SYSTEM, "content": "Another handbook."}
    assert derive_cache_key("team", chat([changed])) != base


def test_breakpoint_on_a_content_part_counts() -> None:
    part_cached = {"role": "user", "content": [{"type": "text", "text": "doc", "cache_control": EPH}]}
    key = derive_cache_key("team", chat([part_cached, {"role": "user", "content": "q1"}]))
    assert key is not None
    assert key == derive_cache_key("team", chat([part_cached, {"role": "user", "content": "q2"}]))


def test_tool_breakpoint_covers_tools_only() -> None:
    tools = [{"type": "function", "function": {"name": "f"}, "cache_control": EPH}]
    one = derive_cache_key("team", chat([{"role": "user", "content": "a"}], tools))
    two = derive_cache_key("team", chat([{"role": "user", "content": "b"}], tools))
    assert one is not None
    assert one == two
    more_tools = [*tools, {"type": "function", "function": {"name": "g"}}]
    assert derive_cache_key("team", chat([{"role": "user", "content": "a"}], more_tools)) == one


def test_message_breakpoint_includes_all_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    with_tools = derive_cache_key("team", chat([SYSTEM], tools))
    assert with_tools != derive_cache_key("team", chat([SYSTEM]))


def test_key_is_the_same_in_another_process() -> None:
    code = (
        "import msgspec\n"
        "from gateway.providers.cache_hints import derive_cache_key\n"
        "from gateway.schemas.openai import ChatCompletionRequest\n"
        "body = {'model': 'm', 'messages': [{'role': 'system', 'content': 'Shared handbook.', "
        "'cache_control': {'type': 'ephemeral'}}]}\n"
        "print(derive_cache_key('team', msgspec.convert(body, ChatCompletionRequest)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == derive_cache_key("team", chat([SYSTEM]))


@pytest.mark.parametrize(
    ("kind", "base_url", "setting", "expected"),
    [
        (ProviderKind.OPENAI, "https://api.openai.com/v1", "auto", "openai"),
        (ProviderKind.AZURE, "https://x.openai.azure.com", "auto", "openai"),
        (ProviderKind.OPENAI, "http://10.0.0.5:8000/v1", "auto", "strip"),
        (ProviderKind.OPENAI, "http://10.0.0.5:8000/v1", "pass", "pass"),
        (ProviderKind.OPENAI, "https://api.openai.com/v1", "strip", "strip"),
        (ProviderKind.OPENAI, "http://vllm/v1", "openai", "openai"),
    ],
)
def test_hint_mode(kind: ProviderKind, base_url: str, setting: str, expected: str) -> None:
    assert hint_mode(provider(kind, base_url=base_url, cache_hints=setting), base_url) == expected


HINTED: dict[str, Any] = {
    "model": "m",
    "prompt_cache_retention": "24h",
    "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": EPH}],
    "messages": [
        {"role": "system", "content": "s", "cache_control": EPH},
        {"role": "user", "content": [{"type": "text", "text": "u", "cache_control": EPH}]},
        {"role": "user", "content": "plain"},
    ],
}


def test_strip_cache_control_removes_every_hint_and_leaves_input_alone() -> None:
    before = msgspec.json.encode(HINTED)
    stripped = strip_cache_control(HINTED)
    assert b"cache_control" not in msgspec.json.encode(stripped)
    assert msgspec.json.encode(HINTED) == before
    assert stripped["messages"][2] is HINTED["messages"][2]  # untouched parts are not copied
    assert stripped["prompt_cache_retention"] == "24h"


def test_strip_cache_control_returns_the_same_body_when_nothing_to_strip() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert strip_cache_control(body) is body


def test_openai_mode_sets_key_unless_client_gave_one() -> None:
    derived = apply_openai_hints(HINTED, "openai", "derived")
    assert derived["prompt_cache_key"] == "derived"
    assert derived["prompt_cache_retention"] == "24h"
    assert b"cache_control" not in msgspec.json.encode(derived)
    own = apply_openai_hints({**HINTED, "prompt_cache_key": "mine"}, "openai", "derived")
    assert own["prompt_cache_key"] == "mine"
    assert "prompt_cache_key" not in apply_openai_hints(HINTED, "openai", None)


def test_strip_mode_removes_openai_hints_too() -> None:
    stripped = apply_openai_hints({**HINTED, "prompt_cache_key": "mine"}, "strip", "derived")
    assert "prompt_cache_key" not in stripped
    assert "prompt_cache_retention" not in stripped
    assert b"cache_control" not in msgspec.json.encode(stripped)


def test_pass_mode_forwards_as_sent() -> None:
    assert apply_openai_hints(HINTED, "pass", "derived") is HINTED
