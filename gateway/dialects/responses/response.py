"""Build Response objects: from a chat completion (translated providers), and the parts every
Response shares: the request's settings repeated back, the usage object with its exact cost.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import msgspec
from msgspec import UNSET, UnsetType

from gateway.dialects.responses.request import responses_request
from gateway.dialects.responses.tools import NamespacedNames
from gateway.providers.base import TokenUsage, UpstreamCall, UpstreamResponse
from gateway.providers.errors import bad_response
from gateway.schemas.openai import ChatCompletion, ResponseMessage
from gateway.schemas.responses import (
    FunctionCallItem,
    FunctionToolEcho,
    IncompleteDetails,
    InputTokensDetails,
    NamespaceToolEcho,
    OutputContent,
    OutputItem,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ReasoningEcho,
    Refusal,
    Response,
    ResponsesRequest,
    ResponseStatus,
    ResponsesTool,
    ResponseUsage,
    TextEcho,
    TextFormatEcho,
    ToolEcho,
)

IdSource = Callable[[str], str]  # a new id with the given prefix


def random_id(prefix: str) -> str:
    """An id as OpenAI shapes them (`resp_...`, `msg_...`, `fc_...`)."""
    return f"{prefix}{uuid.uuid4().hex}"


def usage_cost(call: UpstreamCall, usage: TokenUsage | None, tier: str | None = None) -> str | None:
    """The exact cost of `usage` at the call's deployment (at service tier `tier`, where the
    upstream said which served it) as a decimal string, as on its usage record; None without a
    price or believed counts."""
    if call.tariff is None or usage is None:
        return None
    return format((call.tariff if tier is None else call.tariff.tier(tier)).cost(usage), "f")


def response_usage(call: UpstreamCall, usage: TokenUsage) -> ResponseUsage:
    result = ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens
        ),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(),
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
    )
    cost = usage_cost(call, usage)
    if cost is not None:
        result.cost = cost
    return result


def function_call_item(
    names: NamespacedNames, *, id: str, status: ResponseStatus, call_id: str, chat_name: str, arguments: str
) -> FunctionCallItem:
    """The function_call item of a chat tool call: a namespace function's flattened name split
    back into `namespace` and `name`."""
    namespace, name = names.split(chat_name)
    item = FunctionCallItem(id=id, status=status, call_id=call_id, name=name, arguments=arguments)
    if namespace is not None:
        item.namespace = namespace
    return item


def echoed_tools(tools: list[ResponsesTool] | None) -> list[ToolEcho]:
    """The function and namespace tools of a request as its Response repeats them; built-in tools
    reached no upstream (gateway.dialects.responses.tools), so they are not repeated."""
    echoed: list[ToolEcho] = []
    for tool in tools or ():
        if tool.type == "function":
            echoed.append(_function_echo(tool))
        elif tool.type == "namespace":
            members = [_function_echo(member) for member in tool.tools or () if member.type == "function"]
            echoed.append(
                NamespaceToolEcho(name=tool.name or "", description=tool.description or "", tools=members)
            )
    return echoed


def _function_echo(tool: ResponsesTool) -> FunctionToolEcho:
    return FunctionToolEcho(
        name=tool.name or "",
        description=tool.description,
        parameters=tool.parameters,
        strict=bool(tool.strict),
    )


def outcome(finish_reason: str | None) -> tuple[ResponseStatus, IncompleteDetails | None]:
    """A chat finish reason as a Response's status: output cut short is `incomplete`."""
    if finish_reason == "length":
        return "incomplete", IncompleteDetails(reason="max_output_tokens")
    if finish_reason == "content_filter":
        return "incomplete", IncompleteDetails(reason="content_filter")
    return "completed", None


def new_response(
    request: ResponsesRequest,
    *,
    response_id: str,
    created_at: int,
    status: ResponseStatus,
    output: list[OutputItem],
    usage: ResponseUsage | UnsetType = UNSET,
    incomplete: IncompleteDetails | None = None,
) -> Response:
    """A Response to `request`, with the settings it asked for repeated and `model` its alias."""
    text_format = request.text.format if request.text is not None else None
    return Response(
        id=response_id,
        created_at=created_at,
        status=status,
        incomplete_details=incomplete,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        model=request.model,
        output=output,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        reasoning=ReasoningEcho(
            effort=request.reasoning.effort if request.reasoning else None,
            summary=request.reasoning.summary if request.reasoning else None,
        ),
        temperature=request.temperature,
        text=TextEcho(
            format=TextFormatEcho(type="text")
            if text_format is None
            else TextFormatEcho(
                type=text_format.type,
                name=text_format.name,
                schema=text_format.schema,
                description=text_format.description,
                strict=text_format.strict,
            )
        ),
        tool_choice=request.tool_choice if request.tool_choice is not None else "auto",
        tools=echoed_tools(request.tools),
        top_p=request.top_p,
        truncation=request.truncation or "disabled",
        previous_response_id=request.previous_response_id,
        store=request.store is not False,  # OpenAI's default; the gateway keeps it (responses.store)
        usage=usage,
        user=request.user if request.user is not None else UNSET,
        metadata=request.metadata or {},
    )


def response_from_chat(
    call: UpstreamCall, answer: UpstreamResponse, *, clock_s: float, new_id: IdSource
) -> Response:
    """The Response for the Responses call `call`, from the chat adapter's answer to its chat
    translation."""
    try:
        completion = msgspec.json.decode(answer.body, type=ChatCompletion)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("not a chat completion") from None
    if not completion.choices:
        raise bad_response("a chat completion without choices")
    request = responses_request(call.body)
    names = NamespacedNames(request.tools)
    response_id = new_id("resp_")
    choice = completion.choices[0]
    status, incomplete = outcome(choice.finish_reason)
    message = choice.message or ResponseMessage()
    output: list[OutputItem] = []
    content: list[OutputContent] = []
    if message.content is not None or message.refusal is None:
        content.append(OutputText(text=message.content or ""))
    if message.refusal is not None:
        content.append(Refusal(refusal=message.refusal))
    if message.content or message.refusal is not None or not message.tool_calls:
        output.append(OutputMessage(id=new_id("msg_"), status=status, content=content))
    for tool_call in message.tool_calls or ():
        output.append(
            function_call_item(
                names,
                id=new_id("fc_"),
                status="completed",
                call_id=tool_call.id or "",
                chat_name=tool_call.function.name if tool_call.function else "",
                arguments=tool_call.function.arguments if tool_call.function else "",
            )
        )
    return new_response(
        request,
        response_id=response_id,
        created_at=completion.created or int(clock_s),
        status=status,
        output=output,
        usage=response_usage(call, answer.usage) if answer.usage is not None else UNSET,
        incomplete=incomplete,
    )
