"""Prices token usage exactly: `Decimal` arithmetic on USD-per-million-token prices, no floats."""

from __future__ import annotations

from decimal import Decimal

from gateway.providers.base import TokenUsage
from gateway.settings import Price

PER_TOKENS = Decimal(1_000_000)


def cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """What the request costs: cached reads and cache writes at their own prices when configured."""
    cached_price = price.input if price.cached_input is None else price.cached_input
    write_price = price.input if price.cache_write is None else price.cache_write
    micro_usd = (
        uncached_prompt_tokens(usage) * price.input
        + usage.cached_tokens * cached_price
        + usage.cache_write_tokens * write_price
        + usage.completion_tokens * price.output
    )
    return micro_usd / PER_TOKENS


def uncached_cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """What the request would have cost with every prompt token at the plain input price."""
    return (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / PER_TOKENS


def uncached_prompt_tokens(usage: TokenUsage) -> int:
    """Prompt tokens neither read from nor written to a cache (never negative)."""
    return max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)


def money_str(amount: Decimal) -> str:
    """An exact decimal string with no exponent and no trailing zeros: `0.000006`, `12.5`, `0`."""
    text = format(amount.normalize(), "f")
    return "0" if text in ("-0", "") else text
