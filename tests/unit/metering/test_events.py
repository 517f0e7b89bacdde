"""The usage event's one builder: where it was served, its counts priced, and nothing built elsewhere."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from gateway.metering.events import UsageEvent, UsageSource, usage_event
from gateway.metering.pricing import Tariff
from gateway.providers.base import TokenUsage
from gateway.settings import Price
from gateway.settings.catalog import TierMultipliers
from tests.unit.routing.catalog import CHAT

PACKAGE = Path(__file__).resolve().parents[3] / "gateway"
CLAUDE = CHAT["claude-us"]
TARIFF = Tariff(Price(input=Decimal(3), output=Decimal(15), cached_input=Decimal("0.3")))
USAGE = TokenUsage(prompt_tokens=1_000, completion_tokens=100, cached_tokens=400)


def built(**fields: Any) -> UsageEvent:
    values: dict[str, Any] = {
        "created_at": 1_767_225_600.0,
        "team_id": "team-1",
        "key_id": "key-1",
        "deployment": CLAUDE,
        "endpoint": "chat/completions",
        "status": 200,
        "usage": USAGE,
        "source": UsageSource.UPSTREAM,
        "tariff": TARIFF,
    }
    return usage_event("req-1", **(values | fields))


def test_the_event_names_where_it_was_served_and_prices_its_counts() -> None:
    event = built(batch_id="b", latency_ms=12.5, queue_ms=1.0, client_request_id="c", response_id="r")
    passed = (event.batch_id, event.latency_ms, event.queue_ms, event.client_request_id, event.response_id)
    assert passed == ("b", 12.5, 1.0, "c", "r")
    assert (event.model, event.provider, event.region, event.deployment, event.upstream_model) == (
        "chat", "claude-us", "us-east", "claude-us/claude-x", "claude-x"
    )  # fmt: skip
    assert (event.prompt_tokens, event.completion_tokens, event.cached_tokens) == (1_000, 100, 400)
    # 600 x 3 + 400 x 0.3 + 100 x 15 per million; uncached: 1,000 x 3 + 100 x 15
    assert event.cost == Decimal("0.00342")
    assert event.uncached_cost == Decimal("0.0045")
    assert event.usage_source is UsageSource.UPSTREAM


def test_a_cost_the_answer_stated_is_recorded_as_it_is() -> None:
    event = built(cost=Decimal("0.01"))
    assert (event.cost, event.uncached_cost) == (Decimal("0.01"), Decimal("0.0045"))


def test_no_counts_have_no_source_and_cost_nothing() -> None:
    event = built(usage=None, status=502, error_code="upstream_error")
    assert (event.prompt_tokens, event.usage_source, event.cost) == (0, UsageSource.NONE, Decimal(0))


def test_without_a_tariff_nothing_is_billed() -> None:
    event = built(tariff=None, cost=Decimal("1"))
    assert (event.prompt_tokens, event.cost, event.uncached_cost) == (1_000, Decimal(0), Decimal(0))


def test_only_the_builder_constructs_a_usage_event() -> None:
    """A field added to the event is then filled on every path that meters."""
    builders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "UsageEvent":
                builders.append(str(path.relative_to(PACKAGE.parent)))
    assert builders == ["gateway/metering/events.py"]


FLEX = Tariff(
    Price(
        input=Decimal(3),
        output=Decimal(15),
        cached_input=Decimal("0.3"),
        tier_multipliers=msgspec.convert({"flex": "0.5"}, TierMultipliers, strict=False),
    )
)


def test_the_event_is_priced_at_its_tier_and_keeps_it() -> None:
    flex, normal = built(tariff=FLEX, service_tier="flex"), built(tariff=FLEX)
    # 600 x 1.5 + 400 x 0.15 + 100 x 7.5 micro-USD: half of the normal 3420
    assert (flex.service_tier, flex.cost, flex.uncached_cost) == (
        "flex",
        Decimal("0.00171"),
        Decimal("0.00225"),
    )
    assert (normal.service_tier, normal.cost) == (None, Decimal("0.00342"))


def test_a_tier_the_catalog_does_not_price_is_kept_at_the_normal_price() -> None:
    event = built(tariff=FLEX, service_tier="scale")
    assert (event.service_tier, event.cost) == ("scale", Decimal("0.00342"))


def test_a_tier_name_no_record_could_hold_is_not_kept() -> None:
    assert built(service_tier="x" * 17).service_tier is None
    assert built(service_tier="").service_tier is None


def test_an_event_buffered_before_tiers_decodes_without_one() -> None:
    event = built()
    older = {k: v for k, v in msgspec.to_builtins(event).items() if k != "service_tier"}
    assert msgspec.convert(older, UsageEvent, strict=False).service_tier is None
