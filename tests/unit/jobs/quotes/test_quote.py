"""Lanes, costs and the placement rules' picks (gateway.jobs.quotes.lanes, gateway.jobs.quotes.quote)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from gateway.auth.principal import Principal
from gateway.jobs.input_lines import InputCheck
from gateway.jobs.quotes.lanes import quote_lanes
from gateway.jobs.quotes.quote import count, lane_quote, output_allowance, pick, quote_lines, window_of
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import Directives
from gateway.schemas.quotes import QuoteDuration, QuoteLane
from gateway.settings.catalog import load_catalog

CATALOG = """
providers:
  - {name: local, kind: mock, region: eu}
  - {name: cloud, kind: openai, region: us, base_url: "http://cloud/v1", batch_execution: provider}
models:
  - name: chat
    deployments:
      - {provider: local, model: sim, tokenizer: chars4, price: {input: 1, output: 2, cached_input: "0.5"}}
      - provider: cloud
        model: upstream-chat
        price: {input: 2, output: 8, flex_input: 1, flex_output: 4}
        batch_discount: "0.5"
"""
PRINCIPAL = Principal(key_id="k", key_prefix="sk", team_id="t", team_name="team")


@pytest.fixture
def catalog(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return load_catalog(path, {})


def no_history() -> QuoteDuration:
    return QuoteDuration(
        basis="no history",
        expected_s=None,
        p10_s=None,
        p90_s=None,
        bound_s=None,
        history_batches=0,
        queue_lines=0,
    )


def test_each_deployment_has_its_lanes(catalog) -> None:  # type: ignore[no-untyped-def]
    lanes = quote_lanes("chat", Directives(), PRINCIPAL, DeploymentTable.from_catalog(catalog), catalog)

    assert [lane.id for lane in lanes] == [
        "local/sim:gateway",
        "cloud/upstream-chat:gateway",
        "cloud/upstream-chat:gateway:flex",
        "cloud/upstream-chat:provider",
    ]
    assert [lane.tokenizer for lane in lanes] == ["chars4", "estimate", "estimate", "estimate"]


def test_the_provider_directive_narrows_the_lanes(catalog) -> None:  # type: ignore[no-untyped-def]
    table = DeploymentTable.from_catalog(catalog)

    lanes = quote_lanes("chat", Directives(providers=("local",)), PRINCIPAL, table, catalog)

    assert [lane.id for lane in lanes] == ["local/sim:gateway"]


def test_a_lanes_cost_is_exact_at_its_tariff_with_the_cached_share(catalog) -> None:  # type: ignore[no-untyped-def]
    table = DeploymentTable.from_catalog(catalog)
    local, _, flex, provider = quote_lanes("chat", Directives(), PRINCIPAL, table, catalog)
    system = {"role": "system", "content": "Be brief. " * 40}
    check = InputCheck("/v1/chat/completions")
    lines = []
    for i in range(3):
        body = {"model": "chat", "messages": [system, {"role": "user", "content": f"q{i}"}], "max_tokens": 10}
        entry = {"custom_id": str(i), "method": "POST", "url": "/v1/chat/completions", "body": body}
        lines += check.feed(msgspec.json.encode(entry) + b"\n")
    ordered = quote_lines(lines, default_max_tokens=4096)

    counted = count(ordered, "chars4", 100)
    quoted = lane_quote(local, counted, 30, no_history(), 86_400)

    assert counted.cached > 0 and counted.cached % 16 == 0
    expected = (
        Decimal(counted.prompt - counted.cached) * 1 + Decimal(counted.cached) * Decimal("0.5") + 30 * 2
    ) / 10**6
    assert Decimal(quoted.cost) == expected
    assert quoted.shared_prefix_share == round(counted.cached / counted.prompt, 4)
    assert quoted.tokens.counted_by == "tokenizer"
    estimated = count(ordered, "estimate", 100)
    assert lane_quote(flex, estimated, 30, no_history(), 86_400).prices.input == "1"
    assert lane_quote(provider, estimated, 30, no_history(), 86_400).prices.output == "4"
    assert lane_quote(provider, estimated, 30, no_history(), 86_400).tokens.counted_by == "estimate"


def test_the_output_allowance_is_max_completion_tokens_else_max_tokens_else_the_default_times_n() -> None:
    assert output_allowance({"max_tokens": 7}, 99) == 7
    assert output_allowance({"max_tokens": 7, "max_completion_tokens": 5, "n": 2}, 99) == 10
    assert output_allowance({}, 99) == 99


def lane(
    lane_id: str,
    cost: str,
    *,
    expected_s: float | None = None,
    bound_s: float | None = None,
    execution: str = "gateway",
    tier: str | None = None,
    meets: bool = True,
) -> QuoteLane:
    took = msgspec.structs.replace(no_history(), expected_s=expected_s, p90_s=expected_s, bound_s=bound_s)
    return msgspec.convert(
        {
            "id": lane_id,
            "deployment": "d",
            "provider": "p",
            "region": "r",
            "execution": execution,
            "service_tier": tier,
            "tokens": {
                "prompt": 1,
                "cached": 0,
                "output": 1,
                "counted_by": "estimate",
                "tokenizer": "estimate",
            },
            "shared_prefix_share": 0.0,
            "prices": {"input": "1", "cached_input": "1", "output": "1"},
            "cost": cost,
            "uncached_cost": cost,
            "duration": msgspec.to_builtins(took),
            "meets_window": meets,
        },
        QuoteLane,
    )


def test_the_rules_pick_by_cost_by_speed_and_by_deadline() -> None:
    lanes = [
        lane("self", "3", expected_s=60),
        lane("flex", "2", tier="flex"),
        lane("batch", "1", bound_s=86_400, execution="provider", meets=False),
    ]

    assert pick(lanes, "cheapest").id == "batch"  # type: ignore[union-attr]
    assert pick(lanes, "fastest").id == "self"  # type: ignore[union-attr]
    assert pick(lanes, "by_deadline").id == "flex"  # type: ignore[union-attr]


def test_with_no_history_the_fastest_is_a_gateway_lane_by_tier_and_no_lane_meeting_the_deadline_falls_back_to_it() -> (
    None
):
    lanes = [
        lane("flex", "2", tier="flex", meets=False),
        lane("default", "3", meets=False),
        lane("batch", "1", bound_s=86_400, execution="provider", meets=False),
    ]

    assert pick(lanes, "fastest").id == "default"  # type: ignore[union-attr]
    assert pick(lanes, "by_deadline").id == "default"  # type: ignore[union-attr]


def test_a_completion_window_is_1_to_24_hours() -> None:
    assert window_of("24h") is not None and window_of("1h") is not None
    assert window_of("25h") is None and window_of("0h") is None and window_of("90m") is None
