"""Cache-hint requests in OpenAI format and the exact Anthropic Messages bodies they must become.

Each case is what a client passes to `client.chat.completions.create(model="claude", **openai)`
and the body the Anthropic upstream must receive for it (upstream model `claude-sonnet-4-5`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HANDBOOK = "You extract invoice fields. " * 40  # one long fixed system prompt, the cacheable prefix
EPHEMERAL = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE_MINUTES = {"type": "ephemeral", "ttl": "5m"}
LOOKUP_TOOL_SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}


@dataclass(frozen=True)
class HintCase:
    name: str
    openai: dict[str, Any]
    anthropic: dict[str, Any]


def _text(text: str, cache_control: dict[str, str] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cache_control is not None:
        block["cache_control"] = cache_control
    return block


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def _expected(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, **fields}


HINT_CASES = (
    HintCase(
        "system_string",
        {
            "messages": [
                {"role": "system", "content": HANDBOOK, "cache_control": EPHEMERAL},
                {"role": "user", "content": "Invoice 1: ACME, 12 EUR."},
            ],
        },
        _expected(
            system=[_text(HANDBOOK, EPHEMERAL)],
            messages=[_user(_text("Invoice 1: ACME, 12 EUR."))],
        ),
    ),
    HintCase(
        "system_parts",
        {
            "messages": [
                {
                    "role": "system",
                    "content": [_text("Answer in JSON."), _text(HANDBOOK, ONE_HOUR)],
                },
                {"role": "user", "content": "Invoice 2."},
            ],
        },
        _expected(
            system=[_text("Answer in JSON."), _text(HANDBOOK, ONE_HOUR)],
            messages=[_user(_text("Invoice 2."))],
        ),
    ),
    HintCase(
        "tools",
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "lookup_sku",
                        "description": "Find a product.",
                        "parameters": LOOKUP_TOOL_SCHEMA,
                    },
                    "cache_control": EPHEMERAL,
                }
            ],
            "messages": [{"role": "user", "content": "Which product is SKU-9?"}],
        },
        _expected(
            tools=[
                {
                    "name": "lookup_sku",
                    "description": "Find a product.",
                    "input_schema": LOOKUP_TOOL_SCHEMA,
                    "cache_control": EPHEMERAL,
                }
            ],
            messages=[_user(_text("Which product is SKU-9?"))],
        ),
    ),
    HintCase(
        "message_parts",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [_text(HANDBOOK, EPHEMERAL), _text("Now invoice 3.")],
                },
            ],
        },
        _expected(messages=[_user(_text(HANDBOOK, EPHEMERAL), _text("Now invoice 3."))]),
    ),
    HintCase(
        "message_level",
        {
            "messages": [
                {"role": "user", "content": HANDBOOK, "cache_control": EPHEMERAL},
                {"role": "assistant", "content": "Ready.", "cache_control": EPHEMERAL},
                {"role": "user", "content": [_text("Invoice 4."), _text("Be brief.")]},
            ],
        },
        _expected(
            messages=[
                _user(_text(HANDBOOK, EPHEMERAL)),
                {"role": "assistant", "content": [_text("Ready.", EPHEMERAL)]},
                _user(_text("Invoice 4."), _text("Be brief.")),
            ],
        ),
    ),
    HintCase(
        "ttl_long_before_short",
        {
            "messages": [
                {"role": "system", "content": HANDBOOK, "cache_control": ONE_HOUR},
                {"role": "user", "content": "Batch context.", "cache_control": FIVE_MINUTES},
                {"role": "assistant", "content": "Ok."},
                {"role": "user", "content": "Invoice 5."},
            ],
        },
        _expected(
            system=[_text(HANDBOOK, ONE_HOUR)],
            messages=[
                _user(_text("Batch context.", FIVE_MINUTES)),
                {"role": "assistant", "content": [_text("Ok.")]},
                _user(_text("Invoice 5.")),
            ],
        ),
    ),
)

REJECTED_CASES = {
    "five_breakpoints": [
        {"role": "system", "content": "s", "cache_control": EPHEMERAL},
        _user(_text("a", EPHEMERAL), _text("b", EPHEMERAL)),
        {"role": "assistant", "content": "c", "cache_control": EPHEMERAL},
        {"role": "user", "content": "d", "cache_control": EPHEMERAL},
    ],
    "one_hour_after_five_minutes": [
        {"role": "system", "content": "s", "cache_control": EPHEMERAL},  # no ttl: 5m
        {"role": "user", "content": "u", "cache_control": ONE_HOUR},
    ],
}
