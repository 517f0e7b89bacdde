"""Catalog prices per service tier: flex_* and priority_* rates, tier_multipliers; a negative or
non-finite one, a tier the catalog does not know, or a share that cannot scale the cached rates
exactly is refused at load."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.settings import Catalog, ConfigError, load_catalog

CATALOG = """
providers:
  - name: up
    kind: openai
    region: eu-west
    base_url: https://api.openai.com/v1
models:
  - name: chat
    deployments:
      - provider: up
        model: gpt-5
        price:
          {price}
"""


def load(tmp_path: Path, price: str) -> Catalog:
    path = tmp_path / "gateway.yaml"
    text = CATALOG.format(price=textwrap.indent(textwrap.dedent(price).strip(), " " * 10).lstrip())
    path.write_text(text)
    return load_catalog(path, {})


def test_tier_rates_and_multipliers_load(tmp_path: Path) -> None:
    catalog = load(
        tmp_path,
        """
        input: 1.25
        output: 10
        cached_input: 0.125
        flex_input: 0.625
        flex_output: 5
        priority_cached_input: 0.25
        tier_multipliers: {priority: 2}
        """,
    )
    price = catalog.models[0].deployments[0].price
    assert (price.flex_input, price.flex_output, price.priority_cached_input) == (
        Decimal("0.625"),
        Decimal(5),
        Decimal("0.25"),
    )
    assert price.tier_multipliers is not None and price.tier_multipliers.priority == Decimal(2)


@pytest.mark.parametrize(
    ("price", "field"),
    [
        ("input: 1\nflex_input: -0.5", "flex_input"),
        ("input: 1\npriority_output: -1", "priority_output"),
        ("input: 1\nflex_cached_input: -0.1", "flex_cached_input"),
        ("input: 1\ntier_multipliers: {flex: -0.5}", r"tier_multipliers\.flex"),
    ],
)
def test_a_negative_tier_rate_or_multiplier_is_refused(tmp_path: Path, price: str, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"price\.{field}: must not be negative"):
        load(tmp_path, price)


def test_a_multiplier_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tier_multipliers\.priority: must be a finite number"):
        load(tmp_path, "input: 1\ntier_multipliers: {priority: .inf}")


@pytest.mark.parametrize(
    "price", ["input: 1\ntier_multipliers: {scale: 2}", "input: 1\nbatch_priority_input: 2"]
)
def test_an_unknown_tier_is_refused(tmp_path: Path, price: str) -> None:
    with pytest.raises(ConfigError, match="unknown field"):
        load(tmp_path, price)


def test_a_share_with_no_exact_decimal_needs_its_own_cached_rate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"price\.flex_input: no exact decimal share of input"):
        load(tmp_path, "input: 3\ncached_input: 0.3\nflex_input: 1")
    # with the cached rate given, or a multiplier, the same rates load
    load(tmp_path, "input: 3\ncached_input: 0.3\nflex_input: 1\nflex_cached_input: 0.1")
    load(tmp_path, "input: 3\ncached_input: 0.3\nflex_input: 1\ntier_multipliers: {flex: 0.5}")
