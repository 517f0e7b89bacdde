"""Translate a Responses API request into a chat completion request, for providers whose
/v1/responses is served through their chat API (gateway.dialects.responses.adapter).

`instructions` becomes a system message, input messages chat messages (developer as system, which
every chat template knows), function_call items an assistant turn's tool_calls and
function_call_output items tool messages; function tools and `text.format` map one to one,
namespace tools are flattened and built-in tools dropped or refused (gateway.dialects.responses.tools).
What needs state the gateway does not keep (conversations, stored prompts, background runs, OpenAI
file ids) is refused with a 400 naming the parameter; a `previous_response_id` arrives here with
its conversation already rebuilt in `input` (gateway.responses_store), the id left to be repeated.
What a chat upstream cannot honour and the answer does not depend on is not sent: `store`, `include` (encrypted
reasoning), `reasoning.summary`, `text.verbosity`, `client_metadata`, `metadata`...
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.dialects.responses.tools import chat_tools, flat_name, unsupported
from gateway.errors import InvalidRequest
from gateway.schemas.openai import ChatCompletionRequest, ChatMessage, ContentPart, FunctionCall, ToolCall
from gateway.schemas.responses import InputItem, InputPart, ResponsesRequest, TextFormat

Role = Literal["user", "assistant", "system"]
_ROLES: dict[str, Role] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
_NO_STATE = (
    "the gateway keeps no response state, and this model's provider is served through its chat API; "
    "send the whole conversation in `input`"
)


def responses_request(body: dict[str, Any]) -> ResponsesRequest:
    """The typed view of a client's body (already validated once, when the request was parsed)."""
    try:
        return msgspec.convert(body, ResponsesRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid Responses API request: {exc}") from None


def to_chat_request(
    request: ResponsesRequest, *, stream: bool, drop_builtin_tools: bool = False
) -> tuple[dict[str, Any], ChatCompletionRequest]:
    """The chat completion request for `request`, as a body to send and its typed view.
    `drop_builtin_tools`: the provider's `responses_builtin_tools` is `drop`."""
    _check_stateless(request)
    chat = ChatCompletionRequest(
        model=request.model,
        messages=_messages(request),
        stream=True if stream else None,
        max_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        tools=chat_tools(request, drop_builtin=drop_builtin_tools).tools,
        tool_choice=_tool_choice(request.tool_choice),
        parallel_tool_calls=request.parallel_tool_calls,
        response_format=_response_format(request.text.format if request.text else None),
        user=request.user or request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        prompt_cache_retention=request.prompt_cache_retention,
        service_tier=request.service_tier,
    )
    body: dict[str, Any] = msgspec.to_builtins(chat)
    for message in body["messages"]:  # `type` is a default the typed view leaves out; servers want it
        for call in message.get("tool_calls", ()):
            call["type"] = "function"
    if request.reasoning is not None and request.reasoning.effort is not None:
        body["reasoning_effort"] = request.reasoning.effort  # vLLM and SGLang read it; others ignore it
    return body, chat


def _check_stateless(request: ResponsesRequest) -> None:
    if request.conversation is not None:
        raise unsupported(f"conversation is not supported: {_NO_STATE}", "conversation")
    if request.prompt is not None:
        raise unsupported(
            "prompt (a stored prompt template) is not supported: the gateway cannot read OpenAI's "
            "stored prompts for this model's provider; send the prompt in `instructions` and `input`",
            "prompt",
        )
    if request.background:
        raise unsupported(f"background is not supported: {_NO_STATE}", "background")


def _messages(request: ResponsesRequest) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    if request.instructions:
        messages.append(ChatMessage(role="system", content=request.instructions))
    if request.input is None:
        raise InvalidRequest("input is required", param="input")
    if isinstance(request.input, str):
        messages.append(ChatMessage(role="user", content=request.input))
        return messages
    if not request.input:
        raise InvalidRequest("input must not be empty", param="input")
    for i, item in enumerate(request.input):
        _add_item(messages, item, f"input[{i}]")
    return messages


def _add_item(messages: list[ChatMessage], item: InputItem, where: str) -> None:
    kind = item.type or "message"
    if kind == "message":
        messages.append(_message(item, where))
    elif kind == "function_call":
        _add_function_call(messages, item, where)
    elif kind == "function_call_output":
        if not item.call_id:
            raise InvalidRequest(f"{where}: a function_call_output needs call_id", param=f"{where}.call_id")
        content = _tool_output(item.output, f"{where}.output")
        messages.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=content))
    elif kind == "reasoning":
        pass  # a chat upstream cannot take reasoning back (and encrypted reasoning is OpenAI's own)
    elif kind == "item_reference":
        raise unsupported(f"{where}: item references are not supported: {_NO_STATE}", f"{where}.type")
    else:
        raise unsupported(
            f"{where}: input items of type {kind!r} are not supported for this model "
            "(its provider is served through its chat API)",
            f"{where}.type",
        )


def _message(item: InputItem, where: str) -> ChatMessage:
    role = _ROLES.get(item.role or "")
    if role is None:
        raise InvalidRequest(
            f"{where}.role: must be user, assistant, system or developer", param=f"{where}.role"
        )
    content: str | list[ContentPart] | None
    if not isinstance(item.content, list):
        content = item.content
    elif role == "user":
        content = [_part(part, f"{where}.content[{j}]") for j, part in enumerate(item.content)]
    else:
        content = "".join(_text_of(part, f"{where}.content[{j}]") for j, part in enumerate(item.content))
    return ChatMessage(role=role, content=content, cache_control=item.cache_control)


def _text_of(part: InputPart, where: str) -> str:
    """The text of a part of a system or assistant message (chat templates want a string there)."""
    if part.type in ("input_text", "output_text", "text"):
        return part.text or ""
    if part.type == "refusal":
        return part.refusal or ""
    raise unsupported(f"{where}: only text may appear in a system or assistant message", f"{where}.type")


def _part(part: InputPart, where: str) -> ContentPart:
    if part.type in ("input_text", "output_text", "text"):
        return ContentPart(type="text", text=part.text or "", cache_control=part.cache_control)
    if part.type == "input_image":
        if part.image_url is None:
            raise _file_id(f"{where}.file_id" if part.file_id else f"{where}.image_url")
        image: dict[str, Any] = {"url": part.image_url}
        if part.detail is not None:
            image["detail"] = part.detail
        return ContentPart(type="image_url", image_url=image, cache_control=part.cache_control)
    if part.type == "input_file":
        if part.file_data is None:
            raise _file_id(f"{where}.file_id" if part.file_id else f"{where}.file_url")
        file = {"file_data": part.file_data, **({"filename": part.filename} if part.filename else {})}
        return ContentPart(type="file", file=file, cache_control=part.cache_control)
    raise unsupported(
        f"{where}: content of type {part.type!r} is not supported for this model", f"{where}.type"
    )


def _file_id(param: str) -> InvalidRequest:
    return unsupported(
        f"{param}: this model's provider cannot fetch files by id or URL; send images as image_url "
        "(an http(s) or data: URL) and files inline as file_data",
        param,
    )


def _add_function_call(messages: list[ChatMessage], item: InputItem, where: str) -> None:
    if not item.call_id or not item.name:
        param = f"{where}.call_id" if not item.call_id else f"{where}.name"
        raise InvalidRequest(f"{where}: a function_call needs call_id and name", param=param)
    name = flat_name(item.namespace, item.name) if item.namespace else item.name
    call = ToolCall(id=item.call_id, function=FunctionCall(name=name, arguments=item.arguments or ""))
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":  # the calls of one turn are one assistant message
        messages[-1] = msgspec.structs.replace(last, tool_calls=[*(last.tool_calls or []), call])
    else:
        messages.append(ChatMessage(role="assistant", tool_calls=[call]))


def _tool_output(output: str | list[InputPart] | None, where: str) -> str | list[ContentPart]:
    if output is None or isinstance(output, str):
        return output or ""
    return [_part(part, f"{where}[{j}]") for j, part in enumerate(output)]


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        namespace = choice.get("namespace")
        name = flat_name(namespace, choice["name"]) if isinstance(namespace, str) else choice["name"]
        return {"type": "function", "function": {"name": name}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise unsupported(
        f"tool_choice {kind!r} is not supported for this model: use auto, none, required or "
        '{"type": "function", "name": ...}',
        "tool_choice",
    )


def _response_format(text_format: TextFormat | None) -> dict[str, Any] | None:
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    if text_format.type != "json_schema":
        raise unsupported(f"text.format type {text_format.type!r} is not supported", "text.format.type")
    if not text_format.name or text_format.schema is None:
        raise InvalidRequest("text.format: a json_schema format needs name and schema", param="text.format")
    schema: dict[str, Any] = {"name": text_format.name, "schema": text_format.schema}
    if text_format.description is not None:
        schema["description"] = text_format.description
    if text_format.strict is not None:
        schema["strict"] = text_format.strict
    return {"type": "json_schema", "json_schema": schema}
