"""The lanes a batch may run on: per deployment the team may use for its model, the gateway sending
its lines (at the provider's default tier, and at each service tier the deployment has a price
for) and, where the provider runs batches itself (`batch_execution: provider`), its Batch API."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gateway.auth.principal import Principal
from gateway.jobs.quotes.tokens import tokenizer_name
from gateway.metering.pricing import Tariff
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives
from gateway.routing.policy import eligible_deployments
from gateway.settings import Catalog
from gateway.settings.catalog import PRICED_TIERS, PROVIDER_BATCH_KINDS, DeploymentSpec

GATEWAY, PROVIDER = "gateway", "provider"  # who sends a lane's lines
# The service tiers a deployment may price besides its default (a lane each where it does)
TIERS = PRICED_TIERS


@dataclass(frozen=True, slots=True)
class Lane:
    deployment: Deployment
    execution: str  # GATEWAY or PROVIDER
    tier: str | None  # None: the provider's default tier
    tariff: Tariff  # what its lines are metered at
    tokenizer: str  # how its prompts are counted (gateway.jobs.quotes.tokens)
    order: int  # the catalog's order of preference, for ties

    @property
    def id(self) -> str:
        return ":".join(part for part in (self.deployment.id, self.execution, self.tier) if part)


def rate(tariff: Tariff, units: int) -> Decimal:
    """A tariff's rate back in USD per million tokens."""
    return Decimal(units).scaleb(-tariff.scale)


def tier_tariff(spec: DeploymentSpec, tariff: Tariff, tier: str) -> Tariff | None:
    """The deployment's price at `tier` (`Tariff.tier`), None where the catalog prices no such tier
    (no such lane): neither a rate of its own nor a multiplier."""
    price = spec.price
    multipliers = price.tier_multipliers
    own = (getattr(price, f"{tier}_{rate}") for rate in ("input", "output", "cached_input"))
    multiplied = multipliers is not None and getattr(multipliers, tier) is not None
    if not multiplied and all(value is None for value in own):
        return None
    return tariff.tier(tier)


def quote_lanes(
    model: str, directives: Directives, principal: Principal, table: DeploymentTable, catalog: Catalog
) -> list[Lane]:
    """Every lane of the deployments this caller may use for `model` under its directives (the
    usual 4xx when there is none), in the catalog's order."""
    specs = {(m.name, f"{s.provider}/{s.model}"): s for m in catalog.models for s in m.deployments}
    lanes: list[Lane] = []
    for deployment in eligible_deployments(model, directives, principal, table):
        spec = specs[(deployment.model, deployment.id)]
        tokenizer = tokenizer_name(spec, deployment.provider)
        priced: list[tuple[str, str | None, Tariff | None]] = [(GATEWAY, None, deployment.tariff)]
        priced += [(GATEWAY, tier, tier_tariff(spec, deployment.tariff, tier)) for tier in TIERS]
        provider = deployment.provider
        if provider.batch_execution == PROVIDER and provider.kind in PROVIDER_BATCH_KINDS:
            priced.append((PROVIDER, None, Tariff(spec.price, spec.batch_discount).batch))
        for execution, tier, tariff in priced:
            if tariff is not None:
                lanes.append(Lane(deployment, execution, tier, tariff, tokenizer, len(lanes)))
    return lanes
