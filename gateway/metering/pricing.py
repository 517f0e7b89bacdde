"""Prices token usage exactly: `Decimal` results from USD-per-million-token prices, no floats.

A request's cost is a sum of tokens times prices, divided by a million. With `Decimal` operands
that is eight `Decimal` operations a request (~13,000 instructions); here each price is turned
once into an integer and a power of ten (`Rates`), the sum is taken in integers, and one `Decimal`
is built from it: the same value, with the same digits and exponent as the `Decimal` arithmetic
gives (`micro_usd / 10**6` of `Decimal` terms), which tests/unit/metering/test_pricing.py checks.
"""

from __future__ import annotations

from decimal import Decimal

from gateway.providers.base import TokenUsage
from gateway.settings import Price

PER_TOKENS = Decimal(1_000_000)
PER_TOKENS_DIGITS = 6
# Past 27 digits `Decimal` arithmetic (28 significant digits) starts rounding: such sums, and
# negative prices, take the `Decimal` path itself, so that the result is always its result.
EXACT_BELOW = 10**27
_MAX_CACHED = 4096  # Price objects remembered (one per deployment; more after reloads)


class Rates:
    """A price's rates as integers scaled by 10**exponent: tokens times rates, summed, are
    micro-USD over 10**-exponent, the exponent the `Decimal` sum of the same terms would have."""

    def __init__(self, price: Price) -> None:
        cached = price.input if price.cached_input is None else price.cached_input
        write = price.input if price.cache_write is None else price.cache_write
        self.exponent = min(
            _exponent(price.input), _exponent(cached), _exponent(write), _exponent(price.output)
        )
        self.input = _scaled(price.input, self.exponent)
        self.cached = _scaled(cached, self.exponent)
        self.write = _scaled(write, self.exponent)
        self.output = _scaled(price.output, self.exponent)
        # uncached_cost_of sums two terms only: input and output, at their own exponent
        self.plain_exponent = min(_exponent(price.input), _exponent(price.output))
        self.plain_input = _scaled(price.input, self.plain_exponent)
        self.plain_output = _scaled(price.output, self.plain_exponent)
        self.negative = min(self.input, self.cached, self.write, self.output) < 0


def _exponent(amount: Decimal) -> int:
    exponent = amount.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"a price must be a finite number, not {amount}")
    return exponent


def _scaled(amount: Decimal, exponent: int) -> int:
    """`amount` times 10**-exponent, exactly (`exponent` is at most the amount's own)."""
    return int(amount.scaleb(-exponent))


_rates: dict[int, tuple[Price, Rates]] = {}


def rates_of(price: Price) -> Rates:
    """The price's rates, worked out once per Price object (a deployment keeps its own)."""
    known = _rates.get(id(price))
    if known is not None and known[0] is price:
        return known[1]
    if len(_rates) >= _MAX_CACHED:
        _rates.clear()
    rates = Rates(price)
    _rates[id(price)] = (price, rates)
    return rates


def cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """What the request costs: cached reads and cache writes at their own prices when configured."""
    rates = rates_of(price)
    micro_usd = (
        uncached_prompt_tokens(usage) * rates.input
        + usage.cached_tokens * rates.cached
        + usage.cache_write_tokens * rates.write
        + usage.completion_tokens * rates.output
    )
    if micro_usd >= EXACT_BELOW or rates.negative:
        return decimal_cost_of(usage, price)
    return _per_million(micro_usd, rates.exponent)


def uncached_cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """What the request would have cost with every prompt token at the plain input price."""
    rates = rates_of(price)
    micro_usd = usage.prompt_tokens * rates.plain_input + usage.completion_tokens * rates.plain_output
    if micro_usd >= EXACT_BELOW or rates.negative:
        return decimal_uncached_cost_of(usage, price)
    return _per_million(micro_usd, rates.plain_exponent)


def decimal_cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """`cost_of` in `Decimal` arithmetic throughout: the definition the integer path reproduces."""
    cached = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    micro_usd = (
        uncached_prompt_tokens(usage) * price.input
        + usage.cached_tokens * cached
        + usage.cache_write_tokens * write
        + usage.completion_tokens * price.output
    )
    return micro_usd / PER_TOKENS


def decimal_uncached_cost_of(usage: TokenUsage, price: Price) -> Decimal:
    """`uncached_cost_of` in `Decimal` arithmetic throughout."""
    return (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / PER_TOKENS


def _per_million(scaled: int, exponent: int) -> Decimal:
    """(scaled * 10**exponent) / 10**6 as `Decimal` division writes it: exact, with trailing zeros
    dropped down to the dividend's exponent and no further."""
    if scaled == 0:
        return Decimal(0).scaleb(exponent)
    result = exponent - PER_TOKENS_DIGITS
    while result < exponent and scaled % 10 == 0:
        scaled //= 10
        result += 1
    return Decimal(scaled).scaleb(result)


def uncached_prompt_tokens(usage: TokenUsage) -> int:
    """Prompt tokens neither read from nor written to a cache (never negative)."""
    return max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)


def money_str(amount: Decimal) -> str:
    """An exact decimal string with no exponent and no trailing zeros: `0.000006`, `12.5`, `0`."""
    text = format(amount.normalize(), "f")
    return "0" if text in ("-0", "") else text
