"""Translate an OpenAI chat completion back into an Anthropic Message, with Anthropic's usage terms.

OpenAI's `prompt_tokens` includes the cached (and cache-write) tokens; Anthropic's `input_tokens`
does not, so the cached parts move to `cache_read_input_tokens` / `cache_creation_input_tokens`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.providers.base import Pricing, TokenUsage
from gateway.providers.errors import bad_response
from gateway.schemas.anthropic import MessageOut, MessageUsage, OutputBlock, StopReason, TextOut, ToolUseOut
from gateway.schemas.openai import ChatCompletion

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def message_id(chat_id: str) -> str:
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def message_usage(usage: TokenUsage | None, tariff: Pricing | None) -> MessageUsage:
    """The Anthropic usage object; zeros (and no cost) when no believable counts came."""
    if usage is None:
        return MessageUsage()
    reported = MessageUsage(
        input_tokens=max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0),
        cache_creation_input_tokens=usage.cache_write_tokens,
        cache_read_input_tokens=usage.cached_tokens,
        output_tokens=usage.completion_tokens,
    )
    if tariff is not None:
        reported.cost = format(tariff.cost(usage), "f")
    return reported


def stop_reason(
    finish_reason: str | None, stop_string: Any, stop_sequences: list[str] | None, tool_calls: bool
) -> tuple[StopReason, str | None]:
    """Anthropic's stop reason and stop sequence for a chat choice's finish."""
    if tool_calls:
        return "tool_use", None
    if finish_reason == "stop" and isinstance(stop_string, str) and stop_string in (stop_sequences or ()):
        return "stop_sequence", stop_string
    return _STOP_REASONS.get(finish_reason or "", "end_turn"), None


def tool_input(arguments: str | None) -> dict[str, Any]:
    """A tool call's arguments as Anthropic's `input` object; text that is no JSON object gives {}."""
    try:
        value = msgspec.json.decode(arguments or "{}")
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def to_message(body: bytes, model: str, usage: MessageUsage, stop_sequences: list[str] | None) -> MessageOut:
    """The Message for a chat completion body (only its first choice: Messages has no `n`)."""
    try:
        completion = msgspec.json.decode(body, type=ChatCompletion)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("not a chat completion") from None
    if not completion.choices or completion.choices[0].message is None:
        raise bad_response("a chat completion without a message")
    choice = completion.choices[0]
    message = choice.message
    assert message is not None
    content: list[OutputBlock] = []
    text = message.content or message.refusal
    if text:
        content.append(TextOut(text=text))
    for call in message.tool_calls or ():
        name, arguments = (call.function.name, call.function.arguments) if call.function else ("", None)
        content.append(ToolUseOut(id=call.id or "", name=name, input=tool_input(arguments)))
    reason, sequence = stop_reason(
        "content_filter" if message.refusal and not message.content else choice.finish_reason,
        choice.stop_reason,
        stop_sequences,
        bool(message.tool_calls),
    )
    return MessageOut(
        id=message_id(completion.id),
        model=model,
        content=content,
        stop_reason=reason,
        stop_sequence=sequence,
        usage=usage,
    )
