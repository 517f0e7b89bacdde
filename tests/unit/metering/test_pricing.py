from __future__ import annotations

import random
from decimal import Decimal

import pytest

from gateway.metering.pricing import Tariff, money_str
from gateway.providers.base import TokenUsage
from gateway.settings import Price

GPT_4O = Price(input=Decimal("2.50"), output=Decimal("10.00"), cached_input=Decimal("1.25"))
SONNET = Price(
    input=Decimal("3"), output=Decimal("15"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75")
)


def cost_of(usage: TokenUsage, price: Price) -> Decimal:
    return Tariff(price).cost(usage)


def uncached_cost_of(usage: TokenUsage, price: Price) -> Decimal:
    return Tariff(price).uncached_cost(usage)


def uncached_prompt_tokens(usage: TokenUsage) -> int:
    """The reference formula's prompt tokens neither read from nor written to a cache."""
    return max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)


def test_cached_tokens_are_priced_at_the_cached_input_price() -> None:
    usage = TokenUsage(prompt_tokens=1000, completion_tokens=200, cached_tokens=400)
    # 600 x 2.50 + 400 x 1.25 + 200 x 10 = 4000 micro-USD
    assert cost_of(usage, GPT_4O) == Decimal("0.004")


def test_cache_reads_and_writes_each_have_their_price() -> None:
    usage = TokenUsage(
        prompt_tokens=10_000, completion_tokens=500, cached_tokens=5000, cache_write_tokens=4000
    )
    # 1000 x 3 + 5000 x 0.30 + 4000 x 3.75 + 500 x 15 = 27000 micro-USD
    assert cost_of(usage, SONNET) == Decimal("0.027")


def test_missing_cache_prices_fall_back_to_the_input_price() -> None:
    price = Price(input=Decimal("0.60"), output=Decimal("0.80"))
    usage = TokenUsage(prompt_tokens=1000, completion_tokens=1000, cached_tokens=300, cache_write_tokens=200)
    assert cost_of(usage, price) == Decimal("0.0014")
    assert cost_of(usage, price) == uncached_cost_of(usage, price)


def test_cost_is_exact_where_floats_are_not() -> None:
    price = Price(input=Decimal("0.1"), output=Decimal("0.2"))
    usage = TokenUsage(prompt_tokens=1, completion_tokens=1)
    assert 0.1 / 1e6 + 0.2 / 1e6 != 0.3 / 1e6
    assert cost_of(usage, price) == Decimal("0.0000003")
    assert money_str(cost_of(usage, price)) == "0.0000003"


def test_uncached_tokens_never_go_negative() -> None:
    usage = TokenUsage(prompt_tokens=100, cached_tokens=150)
    assert uncached_prompt_tokens(usage) == 0
    assert cost_of(usage, GPT_4O) == Decimal("0.0001875")  # 150 x 1.25


def test_uncached_cost_prices_every_prompt_token_at_input() -> None:
    usage = TokenUsage(prompt_tokens=1000, completion_tokens=200, cached_tokens=400)
    assert uncached_cost_of(usage, GPT_4O) == Decimal("0.0045")
    assert uncached_cost_of(usage, GPT_4O) - cost_of(usage, GPT_4O) == Decimal("0.0005")


def test_zero_usage_costs_nothing() -> None:
    assert cost_of(TokenUsage(), SONNET) == 0


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (Decimal("0.0000060000"), "0.000006"),
        (Decimal("1E-10"), "0.0000000001"),
        (Decimal("0E-10"), "0"),
        (Decimal("12.5000"), "12.5"),
        (Decimal("100"), "100"),
        (Decimal("-0.25"), "-0.25"),
    ],
)
def test_money_str_is_plain_and_exact(amount: Decimal, text: str) -> None:
    assert money_str(amount) == text


def _decimal_formula(usage: TokenUsage, price: Price) -> tuple[Decimal, Decimal]:
    """Cost and uncached cost in Decimal arithmetic throughout, as the prices read."""
    cached = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    micro_usd = (
        uncached_prompt_tokens(usage) * price.input
        + usage.cached_tokens * cached
        + usage.cache_write_tokens * write
        + usage.completion_tokens * price.output
    )
    uncached = usage.prompt_tokens * price.input + usage.completion_tokens * price.output
    return micro_usd / Decimal(1_000_000), uncached / Decimal(1_000_000)


_RATES = ["0", "0.1", "2.50", "10", "0.0375", "3.141592653", "1E+1", "15.000", "0.00000001", "1234.5"]


@pytest.mark.parametrize("seed", range(20))
def test_the_integer_tariff_prices_exactly_as_decimal_arithmetic(seed: int) -> None:
    rng = random.Random(seed)
    price = Price(
        input=Decimal(rng.choice(_RATES)),
        output=Decimal(rng.choice(_RATES)),
        cached_input=rng.choice([None, Decimal(rng.choice(_RATES))]),
        cache_write=rng.choice([None, Decimal(rng.choice(_RATES))]),
    )
    tariff = Tariff(price)
    for _ in range(50):
        prompt = rng.choice([0, 1, 7, 1200, 10**6, rng.randrange(10**9)])
        usage = TokenUsage(
            prompt_tokens=prompt,
            completion_tokens=rng.choice([0, 1, 300, rng.randrange(10**7)]),
            cached_tokens=rng.randrange(prompt + 50),  # now and then more than the prompt
            cache_write_tokens=rng.choice([0, rng.randrange(prompt + 1)]),
        )
        cost, uncached = _decimal_formula(usage, price)
        assert tariff.cost(usage) == cost
        assert tariff.uncached_cost(usage) == uncached
        assert money_str(tariff.cost(usage)) == money_str(cost)


def test_a_tariff_keeps_the_most_decimal_places_of_its_rates() -> None:
    tariff = Tariff(Price(input=Decimal("0.0375"), output=Decimal("1E+1"), cached_input=Decimal("3.5")))
    assert (tariff.scale, tariff.input, tariff.cached_input, tariff.cache_write, tariff.output) == (
        4, 375, 35_000, 375, 100_000
    )  # fmt: skip


@pytest.mark.parametrize(
    "usage",
    [
        TokenUsage(prompt_tokens=-1_000_000, completion_tokens=10),
        TokenUsage(prompt_tokens=10, completion_tokens=-1_000_000),
        TokenUsage(prompt_tokens=10, completion_tokens=1, cached_tokens=-1_000_000),
        TokenUsage(prompt_tokens=10, completion_tokens=1, cache_write_tokens=-1_000_000),
    ],
)
def test_a_negative_count_is_priced_as_none_never_as_a_refund(usage: TokenUsage) -> None:
    assert cost_of(usage, SONNET) >= 0
    assert uncached_cost_of(usage, SONNET) >= 0
    assert cost_of(usage, SONNET) == cost_of(
        TokenUsage(
            prompt_tokens=max(usage.prompt_tokens, 0),
            completion_tokens=max(usage.completion_tokens, 0),
            cached_tokens=max(usage.cached_tokens, 0),
            cache_write_tokens=max(usage.cache_write_tokens, 0),
        ),
        SONNET,
    )
