"""`response_format` on Anthropic models: the answer is asked for as a forced tool call.

The Messages API has no JSON mode, but a tool's input always arrives as a JSON object that follows
the tool's `input_schema`. So `json_schema` becomes a tool named after the schema, and
`json_object` one whose schema is any object; the reply translators turn that tool's input back
into the assistant message's `content` (see `response` and `stream`).
"""

from __future__ import annotations

import re
from typing import Any

from gateway.errors import InvalidRequest
from gateway.schemas.anthropic import ToolChoice, ToolDefinition
from gateway.schemas.openai import ChatCompletionRequest

JSON_OBJECT_TOOL = "json_object"
DEFAULT_SCHEMA_TOOL = "json_response"  # OpenAI requires json_schema.name; other servers do not
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI and Anthropic both accept
_SCHEMA_DESCRIPTION = "Give your final answer by calling this tool: its input is the answer."
_OBJECT_DESCRIPTION = (
    "Give your final answer by calling this tool: its input is the answer, "
    "a JSON object shaped as the conversation asks."
)


def answer_tool(chat: ChatCompletionRequest) -> ToolDefinition | None:
    """The tool whose input carries the answer, or None when the reply is free text.

    None too when the client forces one of its own tools (`required` or a named function): that
    turn's answer is the client's tool call, which a second forced tool would only contradict.
    """
    response_format = chat.response_format or {}
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_schema":
        tool = _schema_tool(response_format.get("json_schema"))
    elif kind == "json_object":
        tool = ToolDefinition(
            name=JSON_OBJECT_TOOL, input_schema={"type": "object"}, description=_OBJECT_DESCRIPTION
        )
    else:
        raise InvalidRequest(
            f"response_format of type {kind!r} is not supported by Anthropic models",
            param="response_format.type",
            code="unsupported_parameter",
        )
    if chat.tools and (chat.tool_choice == "required" or isinstance(chat.tool_choice, dict)):
        return None
    if any(t.function is not None and t.function.name == tool.name for t in chat.tools or ()):
        raise InvalidRequest(
            f"response_format: the name {tool.name!r} is also the name of one of the request's tools",
            param="response_format",
        )
    return tool


def answer_choice(chat: ChatCompletionRequest, tool: ToolDefinition) -> ToolChoice:
    """Force the answer tool; with tools of the client's own the model may call those instead."""
    if chat.tools and chat.tool_choice != "none":
        serial = True if chat.parallel_tool_calls is False else None
        return ToolChoice("any", disable_parallel_tool_use=serial)
    return ToolChoice("tool", name=tool.name, disable_parallel_tool_use=True)


def _schema_tool(spec: Any) -> ToolDefinition:
    where = "response_format.json_schema"
    if not isinstance(spec, dict):
        raise InvalidRequest(f"{where}: must be an object", param=where)
    name = spec.get("name", DEFAULT_SCHEMA_TOOL)
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise InvalidRequest(
            f"{where}.name: must be 1-64 letters, digits, underscores or dashes", param=f"{where}.name"
        )
    schema = spec.get("schema", {"type": "object"})
    if isinstance(schema, dict) and "type" not in schema and "properties" in schema:
        schema = {"type": "object", **schema}
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidRequest(
            f"{where}.schema: Anthropic models need an object schema at the root (type: object)",
            param=f"{where}.schema",
            code="unsupported_parameter",
        )
    description = spec.get("description")
    return ToolDefinition(
        name=name,
        input_schema=schema,
        description=description if isinstance(description, str) else _SCHEMA_DESCRIPTION,
    )
