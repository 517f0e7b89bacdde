"""Translate an OpenAI chat completion request into an Anthropic Messages API request.

System and developer messages become `system` blocks, tool messages become `tool_result` blocks
in a user turn, and consecutive turns of one role are merged (Anthropic needs them alternating).
Cache hints land on the matching block (see `cache`); `response_format` becomes a forced tool call
(see `structured`). The request is written with the Messages API's own Structs (gateway.schemas.anthropic).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from gateway.errors import InvalidRequest
from gateway.providers.anthropic.cache import check_breakpoints, read_cache_control
from gateway.providers.anthropic.structured import answer_choice, answer_tool
from gateway.schemas.anthropic import (
    BlockSource,
    ContentBlock,
    InputMessage,
    MessagesRequest,
    RequestMetadata,
    ToolChoice,
    ToolDefinition,
)
from gateway.schemas.openai import ChatCompletionRequest, ChatMessage, ContentPart, ToolCall

Role = Literal["user", "assistant"]
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI clients often leave it out
_DATA_URL = re.compile(r"^data:(?P<media_type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def unsupported(message: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="unsupported_parameter")


def to_messages_request(chat: ChatCompletionRequest, upstream_model: str, *, stream: bool) -> MessagesRequest:
    """The Anthropic request for `chat`; raises InvalidRequest for what Anthropic cannot express."""
    _check_supported(chat)
    answer = answer_tool(chat)
    tools, tool_choice = _tools(chat), _tool_choice(chat)
    system: list[ContentBlock] = []
    turns: list[tuple[Role, list[ContentBlock]]] = []
    for i, message in enumerate(chat.messages):
        where = f"messages[{i}]"
        if message.role in ("system", "developer"):
            system.extend(_system_blocks(message, where))
            continue
        role, blocks = _turn(message, where)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    request = MessagesRequest(
        model=upstream_model,
        max_tokens=_max_tokens(chat),
        messages=[InputMessage(role, blocks) for role, blocks in turns],
        system=system or None,
        tools=[*(tools or ()), answer] if answer else tools,
        tool_choice=answer_choice(chat, answer) if answer else tool_choice,
        temperature=chat.temperature,
        top_p=chat.top_p,
        stop_sequences=[chat.stop] if isinstance(chat.stop, str) else chat.stop or None,
        metadata=RequestMetadata(user_id=chat.user) if chat.user else None,
        stream=True if stream else None,
        service_tier=anthropic_tier(chat.service_tier),
    )
    check_breakpoints(request)
    return request


def anthropic_tier(tier: str | None) -> Literal["auto", "standard_only"] | None:
    """OpenAI's service tier in Anthropic's terms: `auto` and `priority` are `auto` (Anthropic serves
    at its Priority Tier only through `auto`, where the organization has that capacity);
    `default` and `flex` are `standard_only` (Anthropic has no flex tier: standard is the nearer,
    never the dearer priority)."""
    if tier is None:
        return None
    return "auto" if tier in ("auto", "priority") else "standard_only"


def _check_supported(chat: ChatCompletionRequest) -> None:
    if chat.n is not None and chat.n != 1:
        # The Messages API answers with one message; n requests are the client's to send.
        raise unsupported("n > 1 is not supported by Anthropic models: send n requests instead", "n")


def _max_tokens(chat: ChatCompletionRequest) -> int:
    if chat.max_completion_tokens is not None:
        return chat.max_completion_tokens
    return chat.max_tokens if chat.max_tokens is not None else DEFAULT_MAX_TOKENS


def _system_blocks(message: ChatMessage, where: str) -> list[ContentBlock]:
    blocks = _content_blocks(message.content, where)
    if any(block.type != "text" for block in blocks):
        raise unsupported(f"{where}: system messages may only hold text", f"{where}.content")
    return _cache_last(blocks, message, where)


def _turn(message: ChatMessage, where: str) -> tuple[Role, list[ContentBlock]]:
    if message.role == "user":
        return "user", _cache_last(_content_blocks(message.content, where), message, where)
    if message.role == "assistant":
        blocks = _content_blocks(message.content, where)
        for j, call in enumerate(message.tool_calls or ()):
            blocks.append(_tool_use(call, f"{where}.tool_calls[{j}]"))
        return "assistant", _cache_last(blocks, message, where)
    if message.role == "tool":
        if not message.tool_call_id:
            raise InvalidRequest(f"{where}: a tool message needs tool_call_id", param=f"{where}.tool_call_id")
        result = ContentBlock(
            type="tool_result",
            tool_use_id=message.tool_call_id,
            content=_tool_result_content(message.content, where),
        )
        return "user", _cache_last([result], message, where)
    raise unsupported(f"{where}: role {message.role!r} is not supported by Anthropic models", f"{where}.role")


def _cache_last(blocks: list[ContentBlock], message: ChatMessage, where: str) -> list[ContentBlock]:
    """A message-level cache_control belongs on the message's last block."""
    control = read_cache_control(message.cache_control, where)
    if control is None or not blocks:
        return blocks
    return [*blocks[:-1], msgspec.structs.replace(blocks[-1], cache_control=control)]


def _content_blocks(content: str | list[ContentPart] | None, where: str) -> list[ContentBlock]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [ContentBlock(type="text", text=content)]
    blocks: list[ContentBlock] = []
    for j, part in enumerate(content):
        block = _part_block(part, f"{where}.content[{j}]")
        if block is not None:
            blocks.append(block)
    return blocks


def _part_block(part: ContentPart, where: str) -> ContentBlock | None:
    control = read_cache_control(part.cache_control, where)
    if part.type == "text":
        if not part.text and control is None:
            return None  # Anthropic refuses empty text blocks
        return ContentBlock(type="text", text=part.text or "", cache_control=control)
    if part.type == "image_url":
        return ContentBlock(type="image", source=_image_source(part.image_url, where), cache_control=control)
    raise unsupported(f"{where}: content of type {part.type!r} is not supported by Anthropic models", where)


def _image_source(image_url: Any, where: str) -> BlockSource:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise InvalidRequest(f"{where}.image_url: needs a url", param=f"{where}.image_url")
    match = _DATA_URL.match(url)
    if match:
        return BlockSource(type="base64", media_type=match.group("media_type"), data=match.group("data"))
    if url.startswith(("http://", "https://")):
        return BlockSource(type="url", url=url)
    raise InvalidRequest(
        f"{where}.image_url: must be an http(s) URL or a base64 data: URL", param=f"{where}.image_url"
    )


def _tool_result_content(content: str | list[ContentPart] | None, where: str) -> str | list[ContentBlock]:
    if content is None or isinstance(content, str):
        return content or ""
    return _content_blocks(content, where)  # text and image blocks: all a content part can become


def _tool_use(call: ToolCall, where: str) -> ContentBlock:
    try:
        arguments = msgspec.json.decode(call.function.arguments or "{}")
    except msgspec.DecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        param = f"{where}.function.arguments"
        raise InvalidRequest(f"{param}: must be a JSON object", param=param)
    return ContentBlock(type="tool_use", id=call.id, name=call.function.name, input=arguments)


def _tools(chat: ChatCompletionRequest) -> list[ToolDefinition] | None:
    if not chat.tools:
        return None
    definitions = []
    for k, tool in enumerate(chat.tools):
        where = f"tools[{k}]"
        if tool.type != "function" or tool.function is None:
            raise unsupported(f"{where}: only function tools are supported by Anthropic models", where)
        function = tool.function
        definitions.append(
            ToolDefinition(
                name=function.name,
                input_schema=function.parameters or _EMPTY_SCHEMA,
                description=function.description,
                cache_control=read_cache_control(tool.cache_control, where),
            )
        )
    return definitions


def _tool_choice(chat: ChatCompletionRequest) -> ToolChoice | None:
    choice = chat.tool_choice
    serial = True if chat.parallel_tool_calls is False else None
    if choice is None:
        return ToolChoice("auto", disable_parallel_tool_use=True) if serial and chat.tools else None
    if choice == "none":
        return ToolChoice("none")
    if choice in ("auto", "required"):
        return ToolChoice("auto" if choice == "auto" else "any", disable_parallel_tool_use=serial)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest("tool_choice: must be auto, none, required or a function", param="tool_choice")
    return ToolChoice("tool", name=name, disable_parallel_tool_use=serial)
