"""One day of one provider, the gateway's figures beside the provider's: per model and service
tier, tokens (input, cached input, output) and cost, each difference and its share. Pure.

A `Ledger` is one side's day. Token counts are always per (model, tier). Costs are per (model,
tier) where the provider's cost report splits by tier (Anthropic's), else per model over all tiers
(`ALL_TIERS`: OpenAI's costs name a model and what was billed, not the tier); the gateway's costs
are summed to the provider's grain before they are compared. The day's whole cost is compared too,
so that every reconciled day has a finding, a day without traffic included.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from enum import StrEnum

DEFAULT_TIER = "default"
ALL_TIERS = "*"
ALL_MODELS = "*"  # the day's whole bill: a row every reconciled day has, traffic or none
# What each provider calls the tier a request gets when none is asked for ("auto" is how a client
# asks for it): all one tier here. A record without a tier (null) was served at it too.
_DEFAULT_TIER_NAMES = frozenset({"", "auto", "default", "standard", "standard_only"})
# A dated snapshot of a model, as a report names what served a request sent to the model's alias:
# gpt-4o-mini-2024-07-18 (OpenAI), claude-sonnet-4-20250514 (Anthropic)
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


class Measure(StrEnum):
    INPUT = "input"  # every prompt token, cached and cache-written ones included
    CACHED_INPUT = "cached_input"
    OUTPUT = "output"
    COST = "cost"  # USD


def tier_name(raw: str | None) -> str:
    """The tier as reconciled: the provider's default one, whatever its name, is `default`."""
    if raw is None or raw.lower() in _DEFAULT_TIER_NAMES:
        return DEFAULT_TIER
    return raw.lower()


@dataclass(frozen=True, slots=True)
class Tokens:
    input: int = 0
    cached_input: int = 0
    output: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input, self.cached_input + other.cached_input, self.output + other.output
        )

    def of(self, measure: Measure) -> int:
        return int(getattr(self, measure.value))


@dataclass(slots=True)
class Ledger:
    """One side's day: tokens per (model, tier); cost per (model, tier), or per (model, ALL_TIERS)
    when `cost_by_tier` is false."""

    tokens: dict[tuple[str, str], Tokens] = field(default_factory=dict)
    costs: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    cost_by_tier: bool = True

    def add_tokens(self, model: str, tier: str, tokens: Tokens) -> None:
        key = (model, tier)
        self.tokens[key] = self.tokens.get(key, Tokens()) + tokens

    def add_cost(self, model: str, tier: str, amount: Decimal) -> None:
        key = (model, tier if self.cost_by_tier else ALL_TIERS)
        self.costs[key] = self.costs.get(key, Decimal(0)) + amount

    def models(self) -> set[str]:
        return {model for model, _ in self.tokens} | {model for model, _ in self.costs}


@dataclass(frozen=True, slots=True)
class Finding:
    """One measure of one model and tier on one day: `difference` is the provider's figure less the
    gateway's; `share` is the difference over the larger of the two (0 when both are 0), so it is
    between -1 and 1 and a model only one side saw is a share of +1 or -1."""

    day: date
    provider: str
    model: str
    tier: str
    measure: Measure
    gateway: Decimal
    reported: Decimal
    difference: Decimal
    share: float
    exceeded: bool


def share_of(gateway: Decimal, reported: Decimal) -> float:
    larger = max(abs(gateway), abs(reported))
    return 0.0 if larger == 0 else float((reported - gateway) / larger)


def compare(day: date, provider: str, ours: Ledger, theirs: Ledger, threshold: float) -> list[Finding]:
    """Every measure of every (model, tier) either side has, in a stable order, then the day's
    whole cost (`ALL_MODELS`, `ALL_TIERS`)."""
    found: list[Finding] = []

    def finding(model: str, tier: str, measure: Measure, gateway: Decimal, reported: Decimal) -> None:
        share = share_of(gateway, reported)
        exceeded = abs(share) > threshold
        found.append(
            Finding(
                day, provider, model, tier, measure, gateway, reported, reported - gateway, share, exceeded
            )
        )

    for model, tier in sorted(ours.tokens.keys() | theirs.tokens.keys()):
        mine, reported = ours.tokens.get((model, tier), Tokens()), theirs.tokens.get((model, tier), Tokens())
        for measure in (Measure.INPUT, Measure.CACHED_INPUT, Measure.OUTPUT):
            finding(model, tier, measure, Decimal(mine.of(measure)), Decimal(reported.of(measure)))
    our_costs = _at_grain(ours.costs, theirs.cost_by_tier)
    for model, tier in sorted(our_costs.keys() | theirs.costs.keys()):
        gateway_cost = our_costs.get((model, tier), Decimal(0))
        finding(model, tier, Measure.COST, gateway_cost, theirs.costs.get((model, tier), Decimal(0)))
    total = sum(our_costs.values(), Decimal(0)), sum(theirs.costs.values(), Decimal(0))
    finding(ALL_MODELS, ALL_TIERS, Measure.COST, *total)
    return found


def _at_grain(costs: Mapping[tuple[str, str], Decimal], by_tier: bool) -> dict[tuple[str, str], Decimal]:
    if by_tier:
        return dict(costs)
    summed: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for (model, _), amount in costs.items():
        summed[(model, ALL_TIERS)] += amount
    return dict(summed)


def attribute(reported_model: str, known: Iterable[str]) -> str:
    """The gateway's name for a model a report names: itself when the gateway knows it, else the
    known model it is a dated snapshot of (`gpt-4o-mini-2024-07-18` for `gpt-4o-mini`), else itself."""
    known = set(known)
    if reported_model in known:
        return reported_model
    undated = _SNAPSHOT.sub("", reported_model)
    return undated if undated in known else reported_model


def exceeded(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.exceeded]
