"""Translate a client's Messages API request into an OpenAI chat completion request.

`system` becomes the system message, and each `system` turn inside `messages` a system (or, on
OpenAI's own API, developer) message where it stands; a user turn's `tool_result` blocks become tool messages (ahead
of the rest of the turn, as chat wants them right after the assistant's tool calls); an assistant
turn's `tool_use` blocks become its tool_calls. `cache_control` stays on the matching content part,
tool or message, where the OpenAI adapter turns it into `prompt_cache_key` (SPEC section 4).
`output_config.format` becomes `response_format`. What chat cannot express is refused with a 400
naming the parameter where dropping it would change the answer; what changes nothing for a chat
model is dropped (docs/messages.md): `thinking`, `top_k`, every `effort`, earlier turns' thinking
blocks (and so `clear_thinking` context edits), `defer_loading` (the tool is offered from the
start), a system turn's `clear_at` once a later user turn hides it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.schemas.anthropic import (
    ContentBlock,
    InputMessage,
    MessagesRequest,
    OutputFormat,
    ToolChoice,
    ToolDefinition,
)
from gateway.schemas.openai import ChatCompletionRequest

Body = dict[str, Any]
# Fields that need state or services only Anthropic runs.
_ANTHROPIC_ONLY = ("mcp_servers", "container")
_DROPPED_BLOCKS = ("thinking", "redacted_thinking")  # a model reasons anew on every turn
# Context edits that only remove thinking blocks, which a translated request never holds.
_THINKING_EDITS = "clear_thinking_"
_HIDDEN_AFTER_USER_TURN = "next_user_message"  # a system turn's clear_at


def unsupported(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="unsupported_parameter")


def to_chat_body(
    request: MessagesRequest, body: Body, *, max_tokens_field: str, turn_role: str = "system"
) -> Body:
    """The chat completion body for `request`; `body` is the client's own (for fields the typed view
    leaves out). `max_tokens_field`: `max_completion_tokens` for OpenAI's own API, else `max_tokens`;
    `turn_role`: the chat role of a system turn inside `messages` (`developer` on OpenAI's own API)."""
    for field in _ANTHROPIC_ONLY:
        if field in body:
            raise unsupported(f"{field} is only served by Anthropic models", field)
    _check_context_edits(request)
    messages = _messages(request, turn_role)
    if request.cache_control is not None:  # automatic caching: the last block is the breakpoint
        messages[-1] = {**messages[-1], "cache_control": request.cache_control}
    chat: Body = {
        "model": request.model,
        "messages": messages,
        max_tokens_field: request.max_tokens,
    }
    if request.stream:
        chat["stream"] = True
    if request.tools:
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        chat |= _tool_choice(request.tool_choice, bool(request.tools))
    optional = {"temperature": request.temperature, "top_p": request.top_p, "stop": request.stop_sequences}
    chat |= {name: value for name, value in optional.items() if value is not None}
    if request.metadata is not None and request.metadata.user_id:
        chat["user"] = request.metadata.user_id
    if request.service_tier is not None:  # Anthropic's `standard_only` is OpenAI's `default`
        chat["service_tier"] = "default" if request.service_tier == "standard_only" else "auto"
    if request.output_config is not None and request.output_config.format is not None:
        chat["response_format"] = _response_format(request.output_config.format)
    return chat


def _response_format(output_format: OutputFormat) -> Body:
    if output_format.type != "json_schema" or output_format.schema is None:
        param = "output_config.format"
        raise unsupported(f"{param}: only a json_schema with its schema is supported by this model", param)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": output_format.schema}}


def typed_chat(chat: Body) -> ChatCompletionRequest:
    """The typed view of a translated body (it is built to convert; a failure is the client's input)."""
    try:
        return msgspec.convert(chat, ChatCompletionRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"the request cannot be translated to a chat completion: {exc}") from None


def _check_context_edits(request: MessagesRequest) -> None:
    """Clearing thinking changes nothing here (no thinking block is ever sent on); clearing tool
    results or compacting would change what the model reads, which only Anthropic does."""
    edits = request.context_management.edits if request.context_management is not None else []
    for i, edit in enumerate(edits):
        if not edit.type.startswith(_THINKING_EDITS):
            param = f"context_management.edits[{i}]"
            raise unsupported(f"{param}: {edit.type} is only served by Anthropic models", param)


def _messages(request: MessagesRequest, turn_role: str) -> list[Body]:
    messages = _system(request.system)
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    offered = {tool.name for tool in request.tools or ()}
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        if message.role == "system":
            if message.clear_at != _HIDDEN_AFTER_USER_TURN or i > last_user:
                messages += _system_turn(message, where, turn_role, offered)
        elif isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content})
        elif message.role == "user":
            messages += _user_turn(message, where)
        else:
            messages.append(_assistant_turn(message, where))
    return messages


def _system(system: str | list[ContentBlock] | None) -> list[Body]:
    if not system:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    parts = []
    for i, block in enumerate(system):
        if block.type != "text":
            raise unsupported(f"system[{i}]: only text blocks are supported here", f"system[{i}].type")
        parts.append(_part(block, f"system[{i}]"))
    return [{"role": "system", "content": _content(parts)}]


def _system_turn(message: InputMessage, where: str, role: str, offered: set[str]) -> list[Body]:
    """A system turn where it stands. Its `output_config` (effort) is dropped, as the top-level one
    is; a `tool_addition` of a tool in `tools` changes nothing, since every tool is offered from the
    start here; any other change to the tools would, and is refused."""
    if isinstance(message.content, str):
        return [{"role": role, "content": message.content}] if message.content else []
    parts = []
    for j, block in enumerate(message.content):
        at = f"{where}.content[{j}]"
        if block.type == "text":
            parts.append(_part(block, at))
        elif block.type != "tool_addition" or _tool_reference(block.tool) not in offered:
            raise unsupported(f"{at}: a {block.type} block is only served by Anthropic models", at)
    return [{"role": role, "content": _content(parts)}] if parts else []


def _tool_reference(tool: Any) -> str | None:
    """The name a `tool_reference` names, else None."""
    if isinstance(tool, dict) and tool.get("type") == "tool_reference" and isinstance(tool.get("name"), str):
        name: str = tool["name"]
        return name
    return None


def _content(parts: list[Body]) -> str | list[Body]:
    """One plain text (what every chat server takes), or the parts when there are several or one
    carries a cache hint."""
    if len(parts) == 1 and parts[0]["type"] == "text" and "cache_control" not in parts[0]:
        text: str = parts[0]["text"]
        return text
    return parts


def _user_turn(message: InputMessage, where: str) -> list[Body]:
    assert isinstance(message.content, list)
    tool_results: list[Body] = []
    parts: list[Body] = []
    for j, block in enumerate(message.content):
        at = f"{where}.content[{j}]"
        if block.type == "tool_result":
            tool_results.append(_tool_message(block, at))
        elif block.type in ("text", "image"):
            parts.append(_part(block, at))
        else:
            raise unsupported(f"{at}: content of type {block.type!r} is not supported by this model", at)
    if not parts and tool_results:
        return tool_results
    return [*tool_results, {"role": "user", "content": _content(parts)}]


def _assistant_turn(message: InputMessage, where: str) -> Body:
    assert isinstance(message.content, list)
    parts: list[Body] = []
    calls: list[Body] = []
    cache_control = None
    for j, block in enumerate(message.content):
        at = f"{where}.content[{j}]"
        if block.type == "text":
            parts.append(_part(block, at))
        elif block.type == "tool_use":
            calls.append(_tool_call(block, at))
            cache_control = block.cache_control or cache_control
        elif block.type not in _DROPPED_BLOCKS:
            raise unsupported(f"{at}: content of type {block.type!r} is not supported by this model", at)
    turn: Body = {"role": "assistant", "content": _content(parts) if parts else None}
    if calls:
        turn["tool_calls"] = calls
    if cache_control is not None:  # a hint on a tool_use block: the message is where chat keeps it
        turn["cache_control"] = cache_control
    return turn


def _part(block: ContentBlock, where: str) -> Body:
    if block.type == "text":
        part: Body = {"type": "text", "text": block.text or ""}
    elif block.type == "image":
        part = {"type": "image_url", "image_url": {"url": _image_url(block, where)}}
    else:
        raise unsupported(f"{where}: content of type {block.type!r} is not supported here", where)
    if block.cache_control is not None:
        part["cache_control"] = block.cache_control
    return part


def _image_url(block: ContentBlock, where: str) -> str:
    source = block.source
    if source is not None and source.type == "base64" and source.media_type and isinstance(source.data, str):
        return f"data:{source.media_type};base64,{source.data}"
    if source is not None and source.type == "url" and source.url:
        return source.url
    raise unsupported(
        f"{where}.source: an image must be given as base64 data or a URL here", f"{where}.source"
    )


def _tool_message(block: ContentBlock, where: str) -> Body:
    if not block.tool_use_id:
        raise InvalidRequest(f"{where}: a tool_result needs tool_use_id", param=f"{where}.tool_use_id")
    content: str | list[Body] = block.content if isinstance(block.content, str) else ""
    if isinstance(block.content, list) and block.content:
        parts = []
        for k, inner in enumerate(block.content):
            at = f"{where}.content[{k}]"
            if inner.type == "tool_reference" and inner.tool_name:
                # A tool search's find: the tool is offered from the start here, so naming it is all
                text = f"Tool loaded: {inner.tool_name}"
                inner = ContentBlock(type="text", text=text, cache_control=inner.cache_control)
            elif inner.type != "text":
                raise unsupported(f"{at}: a tool result may only hold text for this model", at)
            parts.append(_part(inner, at))
        content = _content(parts)
    message: Body = {"role": "tool", "tool_call_id": block.tool_use_id, "content": content}
    if block.cache_control is not None:
        message["cache_control"] = block.cache_control
    return message


def _tool_call(block: ContentBlock, where: str) -> Body:
    if not block.id or not block.name:
        raise InvalidRequest(f"{where}: a tool_use block needs an id and a name", param=where)
    if not isinstance(block.input, dict):
        raise InvalidRequest(f"{where}.input: must be a JSON object", param=f"{where}.input")
    arguments = msgspec.json.encode(block.input).decode()
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}


def _tool(tool: ToolDefinition, where: str) -> Body:
    if tool.type not in (None, "custom") or tool.input_schema is None:
        kind = tool.type or "a tool without input_schema"
        raise unsupported(f"{where}: {kind} is a server tool, only served by Anthropic models", where)
    function: Body = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    definition: Body = {"type": "function", "function": function}
    if tool.cache_control is not None:
        definition["cache_control"] = tool.cache_control
    return definition


def _tool_choice(choice: ToolChoice, has_tools: bool) -> Body:
    if choice.type == "none":
        return {"tool_choice": "none"}
    if choice.type == "tool":
        if not choice.name:
            raise InvalidRequest("tool_choice: type 'tool' needs a name", param="tool_choice.name")
        chosen: Body = {"tool_choice": {"type": "function", "function": {"name": choice.name}}}
    else:
        chosen = {"tool_choice": "auto" if choice.type == "auto" else "required"}
    if choice.disable_parallel_tool_use and has_tools:
        chosen["parallel_tool_calls"] = False
    return chosen
