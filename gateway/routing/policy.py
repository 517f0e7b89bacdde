"""Route choice as pure functions: (directives, catalog, principal, health, pin) -> RoutePlan.

Nothing here does I/O; pins and health are read before and handed in, and the random source is
injected so that tests are deterministic.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.auth.principal import Principal
from gateway.errors import ModelNotFound, NoRoute, PermissionDenied, UpstreamUnavailable
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives, Fallback
from gateway.routing.health import OpenCircuits


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Deployments to try, in order. `pinned`: never leave deployments[0] (batch or fallback=never)."""

    deployments: tuple[Deployment, ...]
    batch: str | None = None
    pinned: bool = False

    @property
    def first(self) -> Deployment:
        return self.deployments[0]


def eligible_deployments(
    model: str, directives: Directives, principal: Principal, table: DeploymentTable
) -> tuple[Deployment, ...]:
    """The deployments this caller may use for `model` under its directives, in preference order."""
    deployments = table.by_model.get(model)
    if deployments is None:
        raise ModelNotFound(f"The model '{model}' does not exist", param="model")
    # A key that may use a model may use its aliases (the deployments' `model` is the model's name).
    if not (principal.may_use_model(model) or principal.may_use_model(deployments[0].model)):
        raise PermissionDenied(f"This key may not use the model '{model}'", param="model")
    _check_names(directives, principal, table)
    wanted = [
        d
        for d in deployments
        if (directives.region is None or d.region == directives.region)
        and (not directives.providers or d.provider.name in directives.providers)
    ]
    if not wanted:
        available = ", ".join(f"{d.provider.name} ({d.region})" for d in deployments)
        raise NoRoute(
            f"No deployment of '{model}' matches the routing directives; '{model}' is served by: {available}",
            param="model",
        )
    allowed = principal.allowed_regions
    chosen = [d for d in wanted if allowed is None or d.region in allowed]
    if not chosen:  # the directives name only deployments outside the key's regions
        raise _residency_denied(
            allowed or frozenset(), "X-Gateway-Provider" if directives.providers else "model"
        )
    if directives.providers:
        chosen.sort(key=lambda d: directives.providers.index(d.provider.name))
    return tuple(chosen)


def _check_names(directives: Directives, principal: Principal, table: DeploymentTable) -> None:
    """Unknown names are a 400 listing what exists; a region outside the key's is a 403."""
    if directives.region is not None:
        if directives.region not in table.regions:
            raise NoRoute(
                f"Unknown region '{directives.region}'; regions: {', '.join(sorted(table.regions))}",
                param="X-Gateway-Region",
            )
        allowed = principal.allowed_regions
        if allowed is not None and directives.region not in allowed:
            raise _residency_denied(allowed, "X-Gateway-Region")
    unknown = [p for p in directives.providers if p not in table.providers]
    if unknown:
        raise NoRoute(
            f"Unknown provider(s) {', '.join(unknown)}; providers: {', '.join(sorted(table.providers))}",
            param="X-Gateway-Provider",
        )


def _residency_denied(allowed: frozenset[str], param: str) -> PermissionDenied:
    return PermissionDenied(
        f"This key may only be served in: {', '.join(sorted(allowed)) or '(no region)'}",
        param=param,
        code="region_not_allowed",
    )


def plan_route(
    eligible: Sequence[Deployment],
    directives: Directives,
    open_circuits: frozenset[str],
    pinned_to: str | None,
    rng: random.Random,
    preferred: str | None = None,
) -> RoutePlan:
    """Order the eligible deployments; a pin or `fallback: never` binds the request to one.
    `preferred`: the deployment a conversation was served by last, first while it is healthy
    (a batch's pin and the client's own order of providers come before it)."""
    if pinned_to is not None:
        pinned = next((d for d in eligible if d.id == pinned_to), None)
        if pinned is None:
            raise NoRoute(
                f"Batch '{directives.batch}' is pinned to {pinned_to}, which these directives exclude; "
                "end the batch or use a new batch id",
                param="X-Gateway-Batch",
                code="batch_pin_conflict",
            )
        return RoutePlan((pinned,), directives.batch, pinned=True)
    healthy = [d for d in eligible if d.id not in open_circuits]
    if not healthy:
        raise every_circuit_open(eligible, open_circuits)
    ordered = healthy if directives.providers else weighted_order(healthy, rng)
    if preferred is not None and not directives.providers:
        ordered.sort(key=lambda d: d.id != preferred)  # stable: the rest keep their order
    bound = directives.batch is not None or directives.fallback is Fallback.NEVER
    return RoutePlan(tuple(ordered[:1] if bound else ordered), directives.batch, pinned=bound)


def every_circuit_open(eligible: Sequence[Deployment], open_circuits: frozenset[str]) -> UpstreamUnavailable:
    """The 503 when no eligible deployment may be tried, with `Retry-After` set to when the first
    of them turns half-open (1 s when the set does not say)."""
    ids = [d.id for d in eligible]
    wait = open_circuits.retry_after_s(ids) if isinstance(open_circuits, OpenCircuits) else 1
    return UpstreamUnavailable(
        f"Every eligible deployment has an open circuit: {', '.join(ids)}",
        headers={"retry-after": str(wait)},
    )


def weighted_order(deployments: Sequence[Deployment], rng: random.Random) -> list[Deployment]:
    """A weighted shuffle: each deployment's chance to come first is proportional to its weight."""
    keyed = [(rng.random() ** (1.0 / d.weight), d) for d in deployments]
    keyed.sort(key=lambda pair: pair[0], reverse=True)
    return [d for _, d in keyed]


def rendezvous_choice(key: str, deployments: Sequence[Deployment]) -> Deployment:
    """Highest-random-weight choice: every process picks the same deployment for the same key."""
    return max(deployments, key=lambda d: _score(key, d.id, d.weight))


def rendezvous_order(key: str, names: Sequence[str]) -> list[int]:
    """The indexes of `names` by the key's preference: where it goes, then where it overflows;
    losing one name moves only its keys."""
    return sorted(range(len(names)), key=lambda i: _score(key, names[i], 1.0), reverse=True)


def _score(key: str, name: str, weight: float) -> float:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") + 1) / 2**64  # in (0, 1]
    return float(unit ** (1.0 / weight))
