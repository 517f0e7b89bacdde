"""Settings of provider-run batch jobs: `batch_execution`, batch prices and `batch_discount`."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.settings import Catalog, ConfigError, load_catalog

CATALOG = """
providers:
  - name: up
    kind: {kind}
    region: eu-west
    base_url: http://127.0.0.1:9/v1
    {execution}
models:
  - name: chat
    deployments:
      - provider: up
        model: upstream-chat
        {deployment}
"""


def load(tmp_path: Path, kind: str = "openai", execution: str = "", deployment: str = "") -> Catalog:
    path = tmp_path / "gateway.yaml"
    path.write_text(textwrap.dedent(CATALOG.format(kind=kind, execution=execution, deployment=deployment)))
    return load_catalog(path, {})


def test_batch_execution_defaults_to_the_gateway(tmp_path: Path) -> None:
    catalog = load(tmp_path)
    assert catalog.providers[0].batch_execution == "gateway"


@pytest.mark.parametrize("kind", ["openai", "azure", "anthropic"])
def test_provider_execution_is_accepted_for_kinds_with_a_batch_api(tmp_path: Path, kind: str) -> None:
    catalog = load(tmp_path, kind, "batch_execution: provider")
    assert catalog.providers[0].batch_execution == "provider"


def test_provider_execution_of_a_mock_provider_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"providers\[0\]\.batch_execution: .*not mock"):
        load(tmp_path, "mock", "batch_execution: provider")


def test_an_unknown_batch_execution_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="batch_execution: must be gateway or provider"):
        load(tmp_path, execution="batch_execution: upstream")


def test_batch_prices_and_discount_are_read(tmp_path: Path) -> None:
    deployment = "price: {input: 2, output: 8, batch_input: 1, batch_output: 4}\n        batch_discount: 0.5"
    spec = load(tmp_path, deployment=deployment).models[0].deployments[0]
    assert (spec.price.batch_input, spec.price.batch_output, spec.batch_discount) == (
        Decimal(1),
        Decimal(4),
        Decimal("0.5"),
    )


@pytest.mark.parametrize("discount", ["1.5", "-0.1"])
def test_a_discount_outside_0_to_1_is_refused(tmp_path: Path, discount: str) -> None:
    with pytest.raises(ConfigError, match=r"deployments\[0\]\.batch_discount: must be between 0 and 1"):
        load(tmp_path, deployment=f"batch_discount: {discount}")


def test_a_negative_batch_price_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"price\.batch_output: must not be negative"):
        load(tmp_path, deployment="price: {batch_output: -1}")
