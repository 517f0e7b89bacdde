"""Prices token usage exactly: integer arithmetic on USD-per-million-token prices, no floats.

A deployment's `Price` (decimals, as configured) becomes a `Tariff` once, when the catalog is
loaded: each rate as a whole number of 10**-scale USD per million tokens, `scale` the most decimal
places any of its rates has. A request's cost is then a sum of integer products, exact, made a
`Decimal` once, instead of a chain of `Decimal` products, sums and a division on every request.
A tariff's `batch` is the price of the lines a provider's own batch API runs (`batch_price`), and
`tier(name)` the price of a request served at a service tier (`tier_price`).
"""

from __future__ import annotations

from decimal import Decimal, Inexact, localcontext
from fractions import Fraction
from functools import cached_property

from gateway.providers.base import TokenUsage
from gateway.settings import Price
from gateway.settings.catalog import PRICED_TIERS, TierMultipliers

PER_MILLION_DIGITS = 6  # prices are per million tokens


class Tariff:
    """A price in integers: `input`, `cached_input`, `cache_write` and `output` in units of
    10**-`scale` USD per million tokens (the cache rates already fallen back to `input`)."""

    def __init__(
        self,
        price: Price,
        batch_discount: Decimal | None = None,
        *,
        service_tier: str | None = None,
        normal: Tariff | None = None,
    ) -> None:
        self._price = price
        self._batch_discount = batch_discount
        self.service_tier = service_tier  # the tier this tariff prices; None: the normal price
        self._normal = normal  # the tariff whose tier this is (None: this is the normal one)
        self._tiers: dict[str, Tariff] = {}
        cached_input = price.input if price.cached_input is None else price.cached_input
        cache_write = price.input if price.cache_write is None else price.cache_write
        rates = (price.input, cached_input, cache_write, price.output)
        scale = max(0, *(_decimal_places(rate) for rate in rates))
        self.scale = scale
        self.input = _whole(price.input, scale)
        self.cached_input = _whole(cached_input, scale)
        self.cache_write = _whole(cache_write, scale)
        self.output = _whole(price.output, scale)
        self._usd_exponent = -(scale + PER_MILLION_DIGITS)

    @cached_property
    def batch(self) -> Tariff:
        """The tariff of lines run by the provider's batch API (`batch_price`)."""
        return Tariff(batch_price(self._price, self._batch_discount))

    def tier(self, name: str | None) -> Tariff:
        """The tariff of a request served at service tier `name`: flex and priority at their own
        prices (`tier_price`), built once; any other tier (auto, default, one the catalog has no
        prices for, such as OpenAI's `scale`) and None at the normal price. A tier's tariff answers
        as the normal one does, so that a request priced at the tier it asked for can be priced
        again at the tier it was served at."""
        normal = self._normal or self
        if name not in PRICED_TIERS:
            return normal
        assert name is not None
        tariff = normal._tiers.get(name)
        if tariff is None:
            price = tier_price(normal._price, name)
            tariff = Tariff(price, normal._batch_discount, service_tier=name, normal=normal)
            normal._tiers[name] = tariff
        return tariff

    def cost(self, usage: TokenUsage) -> Decimal:
        """What the request costs: cached reads and cache writes at their own prices; never negative."""
        prompt, completion, cached, written = _counts(usage)
        units = (
            max(prompt - cached - written, 0) * self.input
            + cached * self.cached_input
            + written * self.cache_write
            + completion * self.output
        )
        return Decimal(units).scaleb(self._usd_exponent)

    def uncached_cost(self, usage: TokenUsage) -> Decimal:
        """What the request would have cost with every prompt token at the plain input price."""
        prompt, completion, _, _ = _counts(usage)
        units = prompt * self.input + completion * self.output
        return Decimal(units).scaleb(self._usd_exponent)


def batch_price(price: Price, discount: Decimal | None) -> Price:
    """The price of a line a provider's batch API ran: `batch_input` / `batch_output` where given;
    every other rate less `discount` (a share, 0.5 = half price); without either, the normal price."""
    keep = None if discount is None else 1 - discount

    def discounted(rate: Decimal | None) -> Decimal | None:
        return rate if rate is None or keep is None else rate * keep

    input_rate = price.batch_input if price.batch_input is not None else discounted(price.input)
    output_rate = price.batch_output if price.batch_output is not None else discounted(price.output)
    assert input_rate is not None and output_rate is not None  # input and output are always set
    return Price(
        input=input_rate,
        output=output_rate,
        cached_input=discounted(price.cached_input),
        cache_write=discounted(price.cache_write),
    )


def tier_price(price: Price, tier: str) -> Price:
    """The price of a request served at `tier` (flex or priority). Input and output: the tier's own
    rate (`flex_input`...) where given, else the normal rate times the tier's multiplier
    (`tier_multipliers`), else the normal rate. Cached input: the tier's own rate, else the normal
    cached rate (and the cache-write rate, which has no tier field) times the multiplier, else
    scaled as the tier's input was scaled from the normal input (flex_input half of input: the
    cached rate halved too), else as normal. A rate left unset stays unset (and falls back to
    input, as in any price)."""
    multiplier = getattr(price.tier_multipliers or TierMultipliers(), tier)
    own_input = getattr(price, f"{tier}_input")
    share = multiplier if multiplier is not None else _share(own_input, price.input)

    def scaled(rate: Decimal | None, by: Decimal | None) -> Decimal | None:
        return rate if rate is None or by is None else rate * by

    def rate(name: str, normal: Decimal | None, by: Decimal | None) -> Decimal | None:
        own: Decimal | None = getattr(price, f"{tier}_{name}")
        return own if own is not None else scaled(normal, by)

    input_rate = rate("input", price.input, multiplier)
    output_rate = rate("output", price.output, multiplier)
    assert input_rate is not None and output_rate is not None  # input and output are always set
    return Price(
        input=input_rate,
        output=output_rate,
        cached_input=rate("cached_input", price.cached_input, share),
        cache_write=scaled(price.cache_write, share),
    )


def _share(tier_rate: Decimal | None, normal_rate: Decimal) -> Decimal | None:
    """`tier_rate` as a share of `normal_rate`, exactly; None without both, or where the share is
    no finite decimal (the catalog refuses such a price: gateway.settings.catalog)."""
    if tier_rate is None or not normal_rate:
        return None
    return exact_decimal(Fraction(tier_rate) / Fraction(normal_rate))


def exact_decimal(value: Fraction) -> Decimal | None:
    """`value` as a Decimal with no rounding; None where it has no finite decimal expansion."""
    with localcontext() as context:
        context.prec = 200  # far more digits than any two configured rates divided can need
        context.traps[Inexact] = True
        try:
            return Decimal(value.numerator) / Decimal(value.denominator)
        except Inexact:
            return None


def _counts(usage: TokenUsage) -> tuple[int, int, int, int]:
    """Prompt, completion, cached and cache-write tokens, a negative count as none.

    The adapters never hand over a negative count (gateway.providers.usage_bounds); this keeps a
    cost from going below zero whatever the caller, since the configured rates are never negative.
    """
    return (
        max(usage.prompt_tokens, 0),
        max(usage.completion_tokens, 0),
        max(usage.cached_tokens, 0),
        max(usage.cache_write_tokens, 0),
    )


def _decimal_places(rate: Decimal) -> int:
    exponent = rate.as_tuple().exponent
    if not isinstance(exponent, int):  # 'n', 'N' or 'F': the catalog refuses these (gateway.settings)
        raise ValueError(f"a price must be a finite number, not {rate}")
    return -exponent


def _whole(rate: Decimal, scale: int) -> int:
    return int(rate.scaleb(scale))


def money_str(amount: Decimal) -> str:
    """An exact decimal string with no exponent and no trailing zeros: `0.000006`, `12.5`, `0`."""
    text = format(amount.normalize(), "f")
    return "0" if text in ("-0", "") else text
