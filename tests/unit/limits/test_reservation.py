"""What admission reserves: the prompt estimate plus the output allowed, at the dearest price."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.limits import Reservation, Reservations
from gateway.limits.spend import to_units
from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.routing.deployment import DeploymentTable
from gateway.settings import ConfigError, load_catalog
from tests.support.catalogs import catalog, deployment, model, provider

CATALOG = catalog(
    provider("cheap", region="us-east", base_url="http://cheap.invalid/v1"),
    provider("dear", region="eu-west", base_url="http://dear.invalid/v1"),
    models=[
        model(
            "chat",
            deployment("cheap", "c", price={"input": "1", "output": "2"}),
            deployment("dear", "d", price={"input": "3", "output": "10"}),
        ),
        model("embed", deployment("cheap", "e", price={"input": "0.1"})),
    ],
)
RESERVATIONS = Reservations(DeploymentTable.from_catalog(CATALOG), default_max_tokens=1000)


def reserve(body: dict[str, Any], endpoint: Endpoint = Endpoint.CHAT) -> tuple[Reservation, int]:
    """The reservation of a body as the pipeline makes it, and the body's prompt estimate."""
    raw = msgspec.json.encode(body)
    parsed = parse_request(raw, endpoint, 100)
    reservation = RESERVATIONS.for_request(parsed.model, len(raw), parsed.max_output_tokens, parsed.choices)
    return reservation, (len(raw) + 3) // 4


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": [{"role": "user", "content": "hello there"}], **fields}


def usd_per_million(tokens: int, price: str) -> Decimal:
    return tokens * Decimal(price) / 1_000_000


def test_the_output_allowed_is_priced_at_the_dearest_deployment() -> None:
    reservation, prompt = reserve(chat(max_tokens=200))

    assert reservation.tokens == prompt + 200
    assert reservation.units == to_units(usd_per_million(prompt, "3") + usd_per_million(200, "10"))


def test_a_null_max_completion_tokens_is_unset_and_max_tokens_counts() -> None:
    reservation, prompt = reserve(chat(max_completion_tokens=None, max_tokens=1))

    assert reservation.tokens == prompt + 1


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    reservation, prompt = reserve(chat(max_completion_tokens=30, max_tokens=100))

    assert reservation.tokens == prompt + 30


@pytest.mark.parametrize(
    "fields", [{}, {"max_tokens": None}, {"max_tokens": None, "max_completion_tokens": None}]
)
def test_without_a_cap_the_default_is_reserved(fields: dict[str, Any]) -> None:
    reservation, prompt = reserve(chat(**fields))

    assert reservation.tokens == prompt + 1000


@pytest.mark.parametrize(("fields", "output"), [({"max_tokens": 100, "n": 3}, 300), ({"n": 2}, 2000)])
def test_each_choice_reserves_its_output(fields: dict[str, Any], output: int) -> None:
    reservation, prompt = reserve(chat(**fields))

    assert reservation.tokens == prompt + output


def test_an_embedding_reserves_its_input_only() -> None:
    reservation, prompt = reserve({"model": "embed", "input": "some text"}, Endpoint.EMBEDDINGS)

    assert reservation.tokens == prompt
    assert reservation.units == to_units(usd_per_million(prompt, "0.1"))


def test_an_unknown_model_reserves_tokens_but_no_cost() -> None:
    reservation, prompt = reserve(chat(model="nowhere", max_tokens=5))

    assert reservation == Reservation(tokens=prompt + 5, units=0)


MINIMAL = """
providers: [{name: p, kind: mock, region: r}]
models: [{name: m, deployments: [{provider: p, model: x}]}]
"""


def test_the_catalog_sets_the_default_and_the_hold_lifetime(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(MINIMAL + "limits: {default_max_tokens: 512, reservation_ttl_s: 60}\n")

    limits = load_catalog(path, {}).limits

    assert (limits.default_max_tokens, limits.reservation_ttl_s) == (512, 60)


@pytest.mark.parametrize("setting", ["default_max_tokens: -1", "reservation_ttl_s: 0"])
def test_the_catalog_refuses_a_default_or_a_lifetime_out_of_range(tmp_path: Path, setting: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(MINIMAL + f"limits: {{{setting}}}\n")

    with pytest.raises(ConfigError, match=setting.split(":")[0]):
        load_catalog(path, {})


def test_a_priority_request_is_reserved_at_its_tiers_price_and_a_flex_one_at_the_default() -> None:
    tiered = catalog(
        provider("openai", region="us-east", base_url="http://openai.invalid/v1"),
        models=[
            model(
                "chat",
                deployment(
                    "openai",
                    "c",
                    price={"input": "1", "output": "2", "tier_multipliers": {"flex": "0.5", "priority": "2"}},
                ),
            )
        ],
    )
    reservations = Reservations(DeploymentTable.from_catalog(tiered))
    usage = reservations.tokens(4000, 500)  # 1,000 prompt tokens, 500 output

    normal = to_units(usd_per_million(1000, "1") + usd_per_million(500, "2"))
    assert reservations.priced("chat", usage).units == normal
    assert reservations.priced("chat", usage, "priority").units == 2 * normal
    assert reservations.priced("chat", usage, "flex").units == normal  # it may be served at default
