"""Responses tools at a provider served through its chat API: function tools as they are,
namespace tools flattened into function tools, built-in tools dropped or refused.

A `namespace` tool groups function tools under a name; the model calls one by the function's own
name with the group's name as the call's `namespace`. Chat has no groups, so each function of a
namespace becomes the function tool `<namespace>__<name>` (its description led by the
namespace's), and a chat tool call of that name comes back as a `function_call` with `namespace`
and `name` apart (`NamespacedNames`), as OpenAI itself answers.

Built-in tools (web_search, file_search, code_interpreter, image_generation, local_shell, mcp...)
run at OpenAI; a chat upstream has none of them. The rule:

- a tool the client marked optional is dropped: `web_search` with `external_web_access: false`
  (cached results only), and a tool a known client sends on every request whatever the task:
  Codex CLI's `web_search` (live when its sandbox allows network), Codex being told by the
  `x-codex-*` keys of `client_metadata`; its turns go on without it;
- every other built-in tool is dropped when the provider says so (`responses_builtin_tools: drop`),
  and refused otherwise: a 400 naming the tool's index (`tools[3]`).

What was dropped is named in the `x-gateway-dropped-tools` response header and in a log line
(tool types and the provider only, never the request's text).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from gateway.errors import InvalidRequest
from gateway.schemas.openai import FunctionDefinition, Tool
from gateway.schemas.responses import ResponsesRequest, ResponsesTool

log = structlog.get_logger("gateway.responses")

SEPARATOR = "__"  # between a namespace's name and its function's, in the flattened name
DROPPED_HEADER = "x-gateway-dropped-tools"

# Built-in tools a client may mark optional, and how: the field and the value that says so
_OPTIONAL_WHEN = {
    "web_search": ("external_web_access", False),
    "web_search_preview": ("external_web_access", False),
}
# Built-in tools a client sends on every request, by the prefix of the `client_metadata` keys that
# name the client: Codex CLI offers web_search on every turn unless its user turns it off.
_CLIENT_DEFAULTS = (("x-codex-", frozenset({"web_search"})),)


def flat_name(namespace: str, name: str) -> str:
    """The chat function name of the function `name` of the namespace tool `namespace`."""
    return f"{namespace}{SEPARATOR}{name}"


def client_defaults(request: ResponsesRequest) -> frozenset[str]:
    """The built-in tools the request's client sends by default (none for an unknown client)."""
    keys = request.client_metadata or {}
    found: frozenset[str] = frozenset()
    for prefix, tools in _CLIENT_DEFAULTS:
        if any(key.startswith(prefix) for key in keys):
            found |= tools
    return found


def is_optional(tool: ResponsesTool, defaults: frozenset[str] = frozenset()) -> bool:
    """Whether the request may be served without this built-in tool: the client said so, or it is
    one of the tools its client sends by default (`defaults`)."""
    if tool.type in defaults:
        return True
    rule = _OPTIONAL_WHEN.get(tool.type)
    return rule is not None and getattr(tool, rule[0]) is rule[1]


@dataclass(frozen=True, slots=True)
class ChatTools:
    """A request's tools as chat function tools, and the built-in tools left out (their types)."""

    tools: list[Tool] | None
    dropped: tuple[str, ...]


def chat_tools(request: ResponsesRequest, *, drop_builtin: bool) -> ChatTools:
    """The request's tools for a chat upstream; InvalidRequest for a tool it cannot have.
    `drop_builtin`: the provider's `responses_builtin_tools` is `drop`."""
    tools = request.tools
    if not tools:
        return ChatTools(None, ())
    defaults = client_defaults(request)
    translated: list[Tool] = []
    dropped: list[str] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if tool.type == "function":
            translated.append(_function(tool, where))
        elif tool.type == "namespace":
            translated += _namespace(tool, where)
        elif tool.type == "custom":
            raise unsupported(
                f"{where}: custom (free-form) tools are not available for this model: its provider is "
                "served through its chat API, where only function tools exist",
                f"{where}.type",
            )
        elif drop_builtin or is_optional(tool, defaults):
            dropped.append(tool.type)
        else:
            raise unsupported(
                f"{where}: the built-in tool {tool.type!r} is not available for this model: its provider "
                "is served through its chat API, where only function tools exist (a web_search with "
                "external_web_access false is left out instead, and every built-in tool at a provider "
                "set to responses_builtin_tools: drop)",
                f"{where}.type",
            )
    return ChatTools(translated or None, tuple(dropped))


def dropped_tools(request: ResponsesRequest, *, drop_builtin: bool) -> tuple[str, ...]:
    """The types of the built-in tools `chat_tools` leaves out (for a request it accepts)."""
    defaults = client_defaults(request)
    return tuple(
        tool.type
        for tool in request.tools or ()
        if tool.type not in ("function", "namespace", "custom")
        and (drop_builtin or is_optional(tool, defaults))
    )


def dropped_header(dropped: Iterable[str], provider: str) -> dict[str, str]:
    """The response header naming the dropped tools (none: no header), logged once per request."""
    names = list(dict.fromkeys(dropped))  # each type once, in request order
    if not names:
        return {}
    log.info("responses_tools_dropped", tools=names, provider=provider)
    return {DROPPED_HEADER: ", ".join(names)}


def _function(tool: ResponsesTool, where: str, namespace: ResponsesTool | None = None) -> Tool:
    if not tool.name:
        raise InvalidRequest(f"{where}: a function tool needs a name", param=f"{where}.name")
    name, description = tool.name, tool.description
    if namespace is not None and namespace.name:
        name = flat_name(namespace.name, tool.name)
        if namespace.description:
            description = namespace.description + ("\n\n" + description if description else "")
    function = FunctionDefinition(
        name=name, description=description, parameters=tool.parameters, strict=tool.strict
    )
    return Tool(type="function", function=function, cache_control=tool.cache_control)


def _namespace(tool: ResponsesTool, where: str) -> list[Tool]:
    if not tool.name:
        raise InvalidRequest(f"{where}: a namespace tool needs a name", param=f"{where}.name")
    if not tool.tools:
        raise InvalidRequest(f"{where}: a namespace tool needs tools", param=f"{where}.tools")
    flattened = []
    for j, member in enumerate(tool.tools):
        inner = f"{where}.tools[{j}]"
        if member.type != "function":
            raise unsupported(
                f"{inner}: only function tools can be served in a namespace for this model (its "
                "provider is served through its chat API)",
                f"{inner}.type",
            )
        flattened.append(_function(member, inner, namespace=tool))
    return flattened


class NamespacedNames:
    """The flattened names of a request's namespace functions, to split a chat call's name back
    into (namespace, name). Names the request did not flatten stay as they are."""

    def __init__(self, tools: list[ResponsesTool] | None) -> None:
        self._split: dict[str, tuple[str, str]] = {
            flat_name(tool.name, member.name): (tool.name, member.name)
            for tool in tools or ()
            if tool.type == "namespace" and tool.name
            for member in tool.tools or ()
            if member.name
        }

    def split(self, chat_name: str) -> tuple[str | None, str]:
        """(namespace or None, the function's own name) of a chat tool call's name."""
        found = self._split.get(chat_name)
        return found if found is not None else (None, chat_name)


def unsupported(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="unsupported_parameter")
