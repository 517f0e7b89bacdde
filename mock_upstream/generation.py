"""What the mock generates for one request: the words of each choice, or a forced tool call.

Pure: the words come from a hash of the prompt, the count from the behaviour and `max_tokens`; a
forced tool's arguments conform to its schema (`schema_values`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.content import completion_words
from mock_upstream.schema_values import schema_value, tool_arguments


@dataclass(frozen=True, slots=True)
class ForcedTool:
    call_id: str
    name: str
    arguments: str  # a JSON object
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Generation:
    """The output of one request; every choice has `tokens` completion tokens."""

    choices: list[list[str]]  # the words of each choice
    tokens: int
    truncated: bool  # the request's token limit cut the output short
    tool: ForcedTool | None = None

    @property
    def total_tokens(self) -> int:
        return self.tokens * len(self.choices)


def output_tokens(behaviour: MockBehaviour, body: dict[str, Any], *limit_fields: str) -> tuple[int, bool]:
    """The completion tokens per choice, and whether a limit in the request capped them."""
    limits = [body[field] for field in limit_fields if isinstance(body.get(field), int)]
    if limits and min(limits) < behaviour.completion_tokens:
        return max(min(limits), 0), True
    return behaviour.completion_tokens, False


def generate(
    seed_text: str,
    count: int,
    tokens: int,
    truncated: bool,
    tool: ForcedTool | None = None,
    structured: str | None = None,
) -> Generation:
    """`structured`: the JSON every choice answers (structured output) instead of words."""
    if structured is not None and tool is None:
        return Generation([[structured] for _ in range(count)], tokens, truncated)
    choices = [completion_words(seed_text, tokens, salt=str(index)) for index in range(count)]
    return Generation(choices, tokens, truncated, tool)


def structured_text(text_format: Any, schema: Any) -> str | None:
    """The JSON answer a structured output format asks for: a value `schema` accepts for
    json_schema, an empty object for json_object; None for plain text."""
    kind = text_format.get("type") if isinstance(text_format, dict) else None
    if kind == "json_schema":
        return msgspec.json.encode(schema_value(schema)).decode()
    if kind == "json_object":
        return "{}"
    return None


def chat_structured_text(body: dict[str, Any]) -> str | None:
    """`structured_text` of a chat request's `response_format` (its schema under `json_schema`)."""
    response_format = body.get("response_format")
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    return structured_text(response_format, spec.get("schema") if isinstance(spec, dict) else None)


def _named_tool(tools: list[Any], name: str | None, wrapped: bool) -> dict[str, Any] | None:
    """The definition of the tool called `name` (or the first one), unwrapped from `function`."""
    for tool in tools:
        spec = tool.get("function") if wrapped and isinstance(tool, dict) else tool
        if isinstance(spec, dict) and (name is None or spec.get("name") == name):
            return spec
    return None


def _forced(spec: dict[str, Any] | None, prefix: str, schema_field: str) -> ForcedTool | None:
    if spec is None or not isinstance(spec.get("name"), str):
        return None
    arguments = tool_arguments(spec.get(schema_field))
    call_id = f"{prefix}{uuid.uuid4().hex[:24]}"
    return ForcedTool(call_id, spec["name"], msgspec.json.encode(arguments).decode(), arguments)


def openai_forced_tool(body: dict[str, Any]) -> ForcedTool | None:
    """The tool an OpenAI chat request forces (`tool_choice` "required" or a named function)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    if choice == "required":
        return _forced(_named_tool(tools, None, wrapped=True), "call_", "parameters")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return _forced(
            _named_tool(tools, choice["function"].get("name"), wrapped=True), "call_", "parameters"
        )
    return None


def requested_tool(
    behaviour: MockBehaviour, tools: Any, *, wrapped: bool, answered: bool
) -> ForcedTool | None:
    """The call the behaviour's `call_tool` asks for: made when the request offers that tool and the
    conversation does not end with a tool's output (`answered`), so that a turn ends in text."""
    if behaviour.call_tool is None or answered or not isinstance(tools, list):
        return None
    spec = _named_tool(tools, behaviour.call_tool, wrapped)
    # wrapped: OpenAI's function tools; else Anthropic's tools, with their own call ids
    tool = _forced(spec, "call_", "parameters") if wrapped else _forced(spec, "toolu_", "input_schema")
    if tool is None or behaviour.call_arguments is None:
        return tool
    arguments = behaviour.call_arguments
    return ForcedTool(tool.call_id, tool.name, msgspec.json.encode(arguments).decode(), arguments)


def anthropic_forced_tool(body: dict[str, Any]) -> ForcedTool | None:
    """The tool an Anthropic request forces (`tool_choice` of type "any" or "tool")."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not isinstance(tools, list) or not tools or not isinstance(choice, dict):
        return None
    if choice.get("type") == "any":
        return _forced(_named_tool(tools, None, wrapped=False), "toolu_", "input_schema")
    if choice.get("type") == "tool":
        return _forced(_named_tool(tools, choice.get("name"), wrapped=False), "toolu_", "input_schema")
    return None
