"""Prices per service tier: a tier's own rates, else its multiplier, else the normal price; cached
rates scaled with the tier's input; every cost exact."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.metering.pricing import Tariff, tier_price
from gateway.providers.base import TokenUsage
from gateway.settings import Price
from gateway.settings.catalog import TierMultipliers

# gpt-5's published rates: normal, flex (half) and priority
GPT_5 = Price(
    input=Decimal("1.25"),
    output=Decimal("10"),
    cached_input=Decimal("0.125"),
    flex_input=Decimal("0.625"),
    flex_output=Decimal("5"),
    priority_input=Decimal("2.50"),
    priority_output=Decimal("20"),
    priority_cached_input=Decimal("0.25"),
)
USAGE = TokenUsage(prompt_tokens=10_000, completion_tokens=1_000, cached_tokens=4_000)


def test_flex_is_priced_at_its_own_rates_and_the_cached_rate_scaled_like_input() -> None:
    # 6000 x 0.625 + 4000 x 0.0625 + 1000 x 5 = 9000 micro-USD
    assert Tariff(GPT_5).tier("flex").cost(USAGE) == Decimal("0.009")
    assert Tariff(GPT_5).cost(USAGE) == Decimal("0.018")


def test_priority_takes_its_own_cached_rate() -> None:
    # 6000 x 2.5 + 4000 x 0.25 + 1000 x 20 = 36000 micro-USD
    assert Tariff(GPT_5).tier("priority").cost(USAGE) == Decimal("0.036")


@pytest.mark.parametrize("name", ["auto", "default", "scale", "standard", None])
def test_any_other_tier_is_the_normal_price(name: str | None) -> None:
    tariff = Tariff(GPT_5)
    assert tariff.tier(name) is tariff


def test_a_tier_is_built_once_and_answers_as_the_normal_tariff() -> None:
    tariff = Tariff(GPT_5)
    flex = tariff.tier("flex")
    assert tariff.tier("flex") is flex
    assert flex.service_tier == "flex"
    assert flex.tier("default") is tariff  # asked for flex, served at default: the normal price
    assert flex.tier("priority") is tariff.tier("priority")


def test_multipliers_scale_every_rate_where_no_own_rate_is_given() -> None:
    price = Price(
        input=Decimal(3),
        output=Decimal(15),
        cached_input=Decimal("0.30"),
        cache_write=Decimal("3.75"),
        priority_output=Decimal(40),
        tier_multipliers=TierMultipliers(flex=Decimal("0.5"), priority=Decimal(2)),
    )
    flex = tier_price(price, "flex")
    assert (flex.input, flex.output, flex.cached_input, flex.cache_write) == (
        Decimal("1.5"),
        Decimal("7.5"),
        Decimal("0.15"),
        Decimal("1.875"),
    )
    priority = tier_price(price, "priority")
    assert (priority.input, priority.output, priority.cached_input) == (
        Decimal(6),
        Decimal(40),
        Decimal("0.6"),
    )
    usage = TokenUsage(
        prompt_tokens=1_000_000, completion_tokens=1_000_000, cached_tokens=1, cache_write_tokens=3
    )
    # 999996 x 1.5 + 1 x 0.15 + 3 x 1.875 + 1000000 x 7.5 micro-USD
    assert Tariff(price).tier("flex").cost(usage) == Decimal("8.999999775")


def test_a_tier_without_prices_is_billed_as_normal() -> None:
    price = Price(input=Decimal("0.2"), output=Decimal("0.8"), cached_input=Decimal("0.1"))
    assert Tariff(price).tier("flex").cost(USAGE) == Tariff(price).cost(USAGE)


def test_tier_input_alone_leaves_output_at_the_normal_rate_and_an_unset_cached_rate_unset() -> None:
    price = Price(input=Decimal(2), output=Decimal(8), flex_input=Decimal(1))
    flex = tier_price(price, "flex")
    assert (flex.input, flex.output, flex.cached_input) == (Decimal(1), Decimal(8), None)
    # cached tokens fall back to the tier's input rate, as in any price
    usage = TokenUsage(prompt_tokens=1_000_000, cached_tokens=500_000)
    assert Tariff(price).tier("flex").cost(usage) == Decimal(1)


def test_tier_prices_are_exact_at_many_decimal_places() -> None:
    price = Price(
        input=Decimal("0.000000123"),
        output=Decimal("0.1"),
        cached_input=Decimal("0.00000001"),
        flex_input=Decimal("0.0000000615"),
    )
    usage = TokenUsage(prompt_tokens=3, completion_tokens=7, cached_tokens=1)
    # 2 x 0.0000000615 + 1 x 0.000000005 + 7 x 0.1 micro-USD
    assert Tariff(price).tier("flex").cost(usage) == Decimal("0.000000700000128")


def test_the_batch_price_stays_the_normal_tariffs() -> None:
    tariff = Tariff(GPT_5, Decimal("0.5"))
    assert tariff.batch.cost(USAGE) == Decimal("0.009")
