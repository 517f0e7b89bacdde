"""The prompt text of a request in each wire format: every content form counts, and nothing else."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.providers.base import Endpoint
from gateway.proxy.prompt_text import PromptSize
from gateway.proxy.request import parse_request


def size(endpoint: Endpoint, body: dict[str, Any]) -> PromptSize:
    return parse_request(msgspec.json.encode({"model": "m", **body}), endpoint, 100).prompt_size()


def utf8(*texts: str) -> int:
    return sum(len(text.encode()) for text in texts)


def as_json(value: Any) -> int:
    return len(msgspec.json.encode(value))


PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
IMAGE = "data:image/png;base64," + "A" * 4000  # an image is not text: its bytes say nothing of its tokens


# --- chat completions -------------------------------------------------------------------------


def test_chat_counts_every_content_form_tool_calls_and_definitions() -> None:
    function = {"name": "weather", "description": "the weather in a city", "parameters": PARAMETERS}
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "name": "ana", "content": [
            {"type": "text", "text": "Weather in Paris? ", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": IMAGE}},
            {"type": "text", "text": "And Lyon."},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"},
    ]  # fmt: skip

    counted = size(
        Endpoint.CHAT,
        {"messages": messages, "tools": [{"type": "function", "function": function}],
         "response_format": response_format},
    )  # fmt: skip

    texts = utf8("You are terse.", "Answer in French.", "ana", "Weather in Paris? ", "And Lyon.")
    calls = utf8("weather", '{"city":"Paris"}', "sunny, 21C")
    assert counted == PromptSize(texts + calls + as_json(function) + as_json(response_format))


def test_chat_text_is_counted_in_utf8_bytes() -> None:
    counted = size(Endpoint.CHAT, {"messages": [{"role": "user", "content": "日本語のテキスト" * 100}]})

    assert counted.text_bytes == 3 * 8 * 100
    assert counted.tokens == 600


# --- legacy completions and embeddings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "field"), [(Endpoint.COMPLETIONS, "prompt"), (Endpoint.EMBEDDINGS, "input")]
)
def test_a_string_a_list_of_strings_and_token_ids(endpoint: Endpoint, field: str) -> None:
    assert size(endpoint, {field: "one string"}) == PromptSize(utf8("one string"))
    assert size(endpoint, {field: ["first", "second"]}) == PromptSize(utf8("first", "second"))
    assert size(endpoint, {field: [1, 2, 3]}) == PromptSize(0, 3)  # ids are the tokens themselves
    assert size(endpoint, {field: [[1, 2], [3, 4, 5]]}) == PromptSize(0, 5)
    assert size(endpoint, {field: ["text", [1, 2]]}) == PromptSize(utf8("text"), 2)


def test_token_ids_and_text_add_up_in_tokens() -> None:
    assert PromptSize(text_bytes=400, token_ids=7).tokens == 107


# --- the Responses API ------------------------------------------------------------------------


def test_responses_input_as_a_string_with_instructions() -> None:
    counted = size(Endpoint.RESPONSES, {"instructions": "Be brief.", "input": "What is 2+2?"})

    assert counted == PromptSize(utf8("Be brief.", "What is 2+2?"))


def test_responses_input_items_tools_and_text_format() -> None:
    tool = {"type": "function", "name": "weather", "description": "the weather", "parameters": PARAMETERS}
    text_format = {"type": "json_schema", "name": "a", "schema": SCHEMA}
    items = [
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Weather in Paris?"},
            {"type": "input_image", "image_url": IMAGE},
        ]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look."}, {"type": "refusal", "refusal": "No."},
        ]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
    ]  # fmt: skip

    counted = size(Endpoint.RESPONSES, {"input": items, "tools": [tool], "text": {"format": text_format}})

    texts = utf8("Answer in French.", "Weather in Paris?", "Let me look.", "No.")
    calls = utf8("weather", '{"city":"Paris"}', "sunny", "rain")
    assert counted == PromptSize(texts + calls + as_json(tool) + as_json(SCHEMA))


# --- Anthropic's Messages API -----------------------------------------------------------------


def test_messages_system_blocks_tools_and_results() -> None:
    tool = {"name": "weather", "description": "the weather in a city", "input_schema": PARAMETERS}
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "Weather in Paris?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 4000}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a report"}},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call it.", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "rain"}]},
        ]},
    ]  # fmt: skip

    counted = size(
        Endpoint.MESSAGES,
        {"max_tokens": 10, "system": [{"type": "text", "text": "You are terse."}], "messages": messages,
         "tools": [tool], "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    )  # fmt: skip

    texts = utf8("You are terse.", "Weather in Paris?", "a report", "I should call it.")
    calls = utf8("weather", '{"city":"Paris"}', "sunny", "rain")
    definitions = utf8("weather", "the weather in a city") + as_json(PARAMETERS) + as_json(SCHEMA)
    assert counted == PromptSize(texts + calls + definitions)


def test_messages_system_and_content_as_strings() -> None:
    counted = size(
        Endpoint.MESSAGES,
        {"max_tokens": 10, "system": "You are terse.", "messages": [{"role": "user", "content": "Hello"}]},
    )

    assert counted == PromptSize(utf8("You are terse.", "Hello"))


# --- computed only when asked -------------------------------------------------------------------


def test_parsing_does_not_read_the_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size is counted by prompt_size(), never by parse_request: a request the upstream
    counts for pays nothing for it."""
    from gateway.proxy import prompt_text

    def counted(request: Any) -> PromptSize:
        raise AssertionError("the prompt was read while parsing")

    monkeypatch.setitem(prompt_text._PROMPTS, prompt_text.ChatCompletionRequest, counted)

    parsed = parse_request(
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', Endpoint.CHAT, 9
    )

    assert parsed.model == "m"
