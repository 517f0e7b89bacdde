"""The parts of OpenAI's response and chunk format that the gateway reads (for metering and errors)."""

from __future__ import annotations

import msgspec


class PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
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
