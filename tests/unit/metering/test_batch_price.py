"""The batch price of a deployment: explicit batch rates, else a discount, else the normal price."""

from __future__ import annotations

from decimal import Decimal

from gateway.metering.pricing import Tariff, batch_price
from gateway.providers.base import TokenUsage
from gateway.settings import Price

PRICE = Price(input=Decimal("2.50"), output=Decimal("10.00"), cached_input=Decimal("1.25"))
USAGE = TokenUsage(prompt_tokens=1000, completion_tokens=200, cached_tokens=400)


def test_without_batch_rates_or_discount_the_batch_price_is_the_normal_price() -> None:
    assert Tariff(PRICE).batch.cost(USAGE) == Tariff(PRICE).cost(USAGE)


def test_a_discount_takes_its_share_off_every_rate() -> None:
    price = batch_price(PRICE, Decimal("0.5"))
    assert (price.input, price.output, price.cached_input) == (
        Decimal("1.25"),
        Decimal("5"),
        Decimal("0.625"),
    )
    # 600 x 1.25 + 400 x 0.625 + 200 x 5 = 2000 micro-USD: half of the normal 4000
    assert Tariff(PRICE, Decimal("0.5")).batch.cost(USAGE) == Decimal("0.002")


def test_explicit_batch_rates_win_over_the_discount() -> None:
    price = Price(
        input=Decimal(2), output=Decimal(8), batch_input=Decimal("0.3"), batch_output=Decimal("1.1")
    )
    batch = batch_price(price, Decimal("0.5"))
    assert (batch.input, batch.output) == (Decimal("0.3"), Decimal("1.1"))
    usage = TokenUsage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert Tariff(price, Decimal("0.5")).batch.cost(usage) == Decimal("1.4")


def test_cache_rates_fall_back_to_the_batch_input_rate() -> None:
    price = Price(input=Decimal(4), output=Decimal(8), batch_input=Decimal(1))
    usage = TokenUsage(prompt_tokens=1_000_000, cached_tokens=500_000)
    assert Tariff(price).batch.cost(usage) == Decimal(1)


def test_a_whole_discount_makes_the_batch_free() -> None:
    assert Tariff(PRICE, Decimal(1)).batch.cost(USAGE) == 0
