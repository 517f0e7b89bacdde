"""The day's comparison: differences and their shares per model, tier and measure; costs at the
provider's grain; a model only one side saw; dated snapshots; the threshold."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from gateway.reconciliation.comparison import (
    ALL_MODELS,
    ALL_TIERS,
    DEFAULT_TIER,
    Ledger,
    Measure,
    Tokens,
    attribute,
    compare,
    share_of,
    tier_name,
)

DAY = date(2026, 12, 3)


def by_key(findings: list) -> dict:
    return {(f.model, f.tier, f.measure): f for f in findings}


def test_equal_sides_agree_on_every_measure() -> None:
    ours, theirs = Ledger(), Ledger()
    for side in (ours, theirs):
        side.add_tokens("m", DEFAULT_TIER, Tokens(1000, 200, 50))
        side.add_cost("m", DEFAULT_TIER, Decimal("0.0125"))
    findings = compare(DAY, "p", ours, theirs, threshold=0.0)
    assert [(f.model, f.measure) for f in findings] == [
        ("m", Measure.INPUT),
        ("m", Measure.CACHED_INPUT),
        ("m", Measure.OUTPUT),
        ("m", Measure.COST),
        (ALL_MODELS, Measure.COST),
    ]
    assert all(f.difference == 0 and f.share == 0.0 and not f.exceeded for f in findings)


def test_a_difference_has_its_size_sign_and_share() -> None:
    ours, theirs = Ledger(), Ledger()
    ours.add_tokens("m", DEFAULT_TIER, Tokens(1000, 0, 100))
    theirs.add_tokens("m", DEFAULT_TIER, Tokens(1250, 0, 80))
    found = by_key(compare(DAY, "p", ours, theirs, threshold=0.1))
    more = found[("m", DEFAULT_TIER, Measure.INPUT)]
    assert (more.gateway, more.reported, more.difference) == (1000, 1250, 250)
    assert more.share == 0.2 and more.exceeded  # 250 of the larger 1250
    fewer = found[("m", DEFAULT_TIER, Measure.OUTPUT)]
    assert fewer.difference == -20 and fewer.share == -0.2 and fewer.exceeded
    assert not found[("m", DEFAULT_TIER, Measure.CACHED_INPUT)].exceeded


def test_the_threshold_is_exclusive() -> None:
    ours, theirs = Ledger(), Ledger()
    ours.add_tokens("m", DEFAULT_TIER, Tokens(99, 0, 0))
    theirs.add_tokens("m", DEFAULT_TIER, Tokens(100, 0, 0))
    finding = by_key(compare(DAY, "p", ours, theirs, threshold=0.01))[("m", DEFAULT_TIER, Measure.INPUT)]
    assert finding.share == 0.01 and not finding.exceeded


def test_a_model_or_tier_only_one_side_saw_is_a_whole_share() -> None:
    ours, theirs = Ledger(), Ledger()
    ours.add_tokens("m", "flex", Tokens(10, 0, 1))
    theirs.add_tokens("m", DEFAULT_TIER, Tokens(10, 0, 1))
    found = by_key(compare(DAY, "p", ours, theirs, threshold=0.5))
    assert found[("m", "flex", Measure.INPUT)].share == -1.0
    assert found[("m", DEFAULT_TIER, Measure.INPUT)].share == 1.0


def test_costs_are_compared_per_model_when_the_report_has_no_tier() -> None:
    ours, theirs = Ledger(), Ledger(cost_by_tier=False)
    ours.add_cost("m", DEFAULT_TIER, Decimal("0.30"))
    ours.add_cost("m", "flex", Decimal("0.10"))
    theirs.add_cost("m", "anything", Decimal("0.40"))
    costs = [f for f in compare(DAY, "p", ours, theirs, threshold=0.0) if f.measure is Measure.COST]
    assert [(f.model, f.tier, f.gateway, f.reported, f.exceeded) for f in costs] == [
        ("m", ALL_TIERS, Decimal("0.40"), Decimal("0.40"), False),
        (ALL_MODELS, ALL_TIERS, Decimal("0.40"), Decimal("0.40"), False),
    ]


def test_a_day_without_traffic_has_its_whole_cost_compared() -> None:
    [total] = compare(DAY, "p", Ledger(), Ledger(), threshold=0.0)
    assert (total.model, total.tier, total.measure, total.gateway, total.reported) == (
        ALL_MODELS, ALL_TIERS, Measure.COST, 0, 0
    )  # fmt: skip


def test_costs_per_tier_when_the_report_has_tiers() -> None:
    ours, theirs = Ledger(), Ledger()
    ours.add_cost("m", DEFAULT_TIER, Decimal("1"))
    theirs.add_cost("m", DEFAULT_TIER, Decimal("1.5"))
    theirs.add_cost("m", "priority", Decimal("0.5"))
    found = by_key(compare(DAY, "p", ours, theirs, threshold=0.0))
    assert found[("m", DEFAULT_TIER, Measure.COST)].difference == Decimal("0.5")
    assert found[("m", "priority", Measure.COST)].gateway == 0


def test_share_is_zero_when_both_are_zero() -> None:
    assert share_of(Decimal(0), Decimal(0)) == 0.0


def test_each_providers_default_tier_is_one_tier() -> None:
    assert {tier_name(raw) for raw in (None, "", "auto", "default", "standard", "Standard")} == {DEFAULT_TIER}
    assert tier_name("flex") == "flex" and tier_name("priority") == "priority"


def test_a_dated_snapshot_is_attributed_to_its_model() -> None:
    known = {"gpt-4o-mini", "claude-sonnet-4"}
    assert attribute("gpt-4o-mini-2024-07-18", known) == "gpt-4o-mini"
    assert attribute("claude-sonnet-4-20250514", known) == "claude-sonnet-4"
    assert attribute("gpt-4o-mini", known) == "gpt-4o-mini"
    assert attribute("o3-2025-04-16", known) == "o3-2025-04-16"  # no known model: as reported
