"""Translate Anthropic Messages API responses, usage and errors into OpenAI terms.

Anthropic's `input_tokens` excludes cache reads and writes; the OpenAI-format `prompt_tokens` is
the sum of all three, with the cache reads reported as `cached_tokens` (SPEC section 4). A reply
names the alias the client asked for and carries its cost (`usage.cost`, SPEC section 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import msgspec

from gateway.errors import UpstreamError, UpstreamRateLimited, UpstreamUnavailable
from gateway.providers.base import Pricing, TokenUsage, UpstreamResponse
from gateway.providers.errors import UpstreamErrorDetail, bad_response
from gateway.providers.usage_bounds import UntrustedUsage, bounded, reported_count
from gateway.schemas.anthropic import (
    UpstreamBlock,
    UpstreamErrorEnvelope,
    UpstreamErrorObject,
    UpstreamMessage,
    UpstreamUsage,
)
from gateway.schemas.openai import (
    ChatCompletion,
    Choice,
    FunctionCall,
    MessageToolCall,
    PromptTokensDetails,
    ResponseMessage,
    Usage,
)

# The finish reasons OpenAI documents, the ones a translated answer gives.
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]

_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What a translated reply takes from its request: the alias to name, the price to charge, and
    the tool whose input is the answer (`structured`), if the client asked for JSON."""

    model: str
    tariff: Pricing | None = None
    answer_tool: str | None = None

    def cost(self, usage: TokenUsage | None, tier: str | None = None) -> Decimal | None:
        """What believed counts cost at the deployment's price (at `tier`, where the upstream said
        which served it); the usage record takes it as it is."""
        if usage is None or self.tariff is None:
            return None
        return (self.tariff if tier is None else self.tariff.tier(tier)).cost(usage)


# Anthropic's tiers as OpenAI names them (gateway.settings.catalog.SERVICE_TIERS); `batch` kept as is
_SERVED_TIERS = {"standard": "default", "priority": "priority", "batch": "batch"}


def served_tier(usage: UpstreamUsage | None) -> str | None:
    """The tier Anthropic says served a message (its usage's `service_tier`), in OpenAI's terms."""
    tier = None if usage is None else usage.service_tier
    return _SERVED_TIERS.get(tier) if isinstance(tier, str) else None


def usage_object(usage: TokenUsage, cost: Decimal | None) -> Usage:
    """The OpenAI usage object, with the exact cost (`usage.cost`) when there is one."""
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens
        ),
        cost=None if cost is None else format(cost, "f"),
    )


def finish_reason(stop_reason: str | None, tool_calls: bool = True) -> FinishReason:
    """OpenAI's finish reason; a tool-use stop with no tool calls for the client (the answer tool's
    input became the content) is a plain stop."""
    reason = _FINISH_REASONS.get(stop_reason or "", "stop")
    return "stop" if reason == "tool_calls" and not tool_calls else reason


def merged_usage(start: UpstreamUsage, delta: UpstreamUsage) -> UpstreamUsage:
    """message_delta's counts are cumulative; a count it leaves out keeps message_start's."""
    return UpstreamUsage(
        **{
            field: getattr(delta, field) if getattr(delta, field) is not None else getattr(start, field)
            for field in UpstreamUsage.__struct_fields__
        }
    )


def normalise_usage(usage: UpstreamUsage) -> TokenUsage:
    """Anthropic's counts in OpenAI terms; UntrustedUsage when one cannot be true (the prompt, their
    sum, is held to the same bound as each count)."""
    cache_read = reported_count(usage.cache_read_input_tokens, "cache_read_input_tokens")
    cache_write = reported_count(usage.cache_creation_input_tokens, "cache_creation_input_tokens")
    return bounded(
        TokenUsage(
            prompt_tokens=reported_count(usage.input_tokens, "input_tokens") + cache_read + cache_write,
            completion_tokens=reported_count(usage.output_tokens, "output_tokens"),
            cached_tokens=cache_read,
            cache_write_tokens=cache_write,
        )
    )


def parse_messages_response(body: bytes, created: int, reply: ReplyContext) -> UpstreamResponse:
    """The OpenAI chat completion (and metered usage) for an Anthropic Messages API body."""
    try:
        response = msgspec.json.decode(body, type=UpstreamMessage)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("not an Anthropic message") from None
    if response.type == "error" or response.error is not None:
        raise stream_error(response.error or UpstreamErrorObject())
    usage, untrusted = None, None
    try:
        usage = normalise_usage(response.usage) if response.usage else None
    except UntrustedUsage as exc:  # the answer is served without the counts
        untrusted = str(exc)
    tier = served_tier(response.usage)
    cost = reply.cost(usage, tier)
    completion = to_chat_completion(response, created, reply)
    if usage is not None:
        completion.usage = usage_object(usage, cost)
    return UpstreamResponse(
        body=msgspec.json.encode(completion),
        usage=usage,
        untrusted_usage=untrusted,
        cost=cost,
        service_tier=tier,
    )


def to_chat_completion(response: UpstreamMessage, created: int, reply: ReplyContext) -> ChatCompletion:
    answer = next((b for b in response.content if b.type == "tool_use" and b.name == reply.answer_tool), None)
    tool_calls = [
        MessageToolCall(
            id=block.id or "",
            function=FunctionCall(name=block.name or "", arguments=msgspec.json.encode(block.input).decode()),
        )
        for block in response.content
        if block.type == "tool_use" and (reply.answer_tool is None or block.name != reply.answer_tool)
    ]
    message = ResponseMessage(content=_content(response, reply, answer))
    if tool_calls:
        message.tool_calls = tool_calls
    reason = finish_reason(response.stop_reason, bool(tool_calls))
    return ChatCompletion(
        id=response.id,
        created=created,
        model=reply.model,
        choices=[Choice(message=message, finish_reason=reason)],
    )


def _content(response: UpstreamMessage, reply: ReplyContext, answer: UpstreamBlock | None) -> str | None:
    """The message text; with an answer tool, its input as JSON (text written beside it is left out,
    so that the content parses)."""
    if reply.answer_tool is not None:
        return msgspec.json.encode(answer.input).decode() if answer is not None else None
    texts = [block.text for block in response.content if block.type == "text" and block.text is not None]
    return "".join(texts) if texts else None


def anthropic_error_detail(body: bytes) -> UpstreamErrorDetail:
    """The type and message of an Anthropic error body; empty when the body is not one."""
    try:
        envelope = msgspec.json.decode(body, type=UpstreamErrorEnvelope)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return UpstreamErrorDetail()
    if envelope.error is None:
        return UpstreamErrorDetail()
    error = envelope.error
    return UpstreamErrorDetail(message=error.message, type=error.type, code=error.type)


def stream_error(error: UpstreamErrorObject) -> UpstreamError:
    """The gateway error for an Anthropic `error` object sent with a 200 (mid-stream or in a body)."""
    message = f"the upstream reported an error: {error.message or error.type or 'no message'}"
    if error.type == "overloaded_error":
        return UpstreamUnavailable(message)
    if error.type == "rate_limit_error":
        return UpstreamRateLimited(message)
    return UpstreamError(message)
