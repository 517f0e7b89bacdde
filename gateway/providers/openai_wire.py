"""The parts of OpenAI's response and chunk format that the gateway reads (for metering and errors)."""

from __future__ import annotations

from typing import Any

import msgspec

# A count is decoded as whatever JSON value the upstream sent, and judged by
# `gateway.providers.usage_bounds`: a count of the wrong type makes the usage untrusted, not the
# whole answer unreadable.
Count = Any


class PromptDetails(msgspec.Struct):
    cached_tokens: Count = None


class Usage(msgspec.Struct):
    prompt_tokens: Count = None
    completion_tokens: Count = None
    prompt_tokens_details: PromptDetails | None = None


class ErrorObject(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class Metered(msgspec.Struct):
    """The only parts of a response or chunk the gateway reads."""

    usage: Usage | None = None
    choices: list[msgspec.Raw] | None = None
    error: ErrorObject | str | None = None


class ErrorEnvelope(msgspec.Struct):
    error: ErrorObject | str | None = None
