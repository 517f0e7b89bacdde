"""Deployments: one model alias served by one provider, with its upstream model name and prices."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.metering.pricing import Tariff
from gateway.settings import Catalog, Provider


@dataclass(frozen=True, slots=True)
class Deployment:
    id: str  # "<provider>/<upstream model>", stable across processes and restarts
    model: str  # the public alias
    provider: Provider
    upstream_model: str
    tariff: Tariff  # the configured price, in integers (gateway.metering.pricing)
    weight: float = 1.0

    @property
    def region(self) -> str:
        return self.provider.region


@dataclass(frozen=True, slots=True)
class DeploymentTable:
    """Every model and its deployments, in configured order; built once from the catalog."""

    by_model: dict[str, tuple[Deployment, ...]]  # by model name and by alias
    regions: frozenset[str]
    providers: frozenset[str]
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> the model's name

    @classmethod
    def from_catalog(cls, catalog: Catalog) -> DeploymentTable:
        """Each model under its name and under each of its aliases (the same deployments, whose
        `model` is the model's name: usage is recorded under it, whichever name was asked)."""
        providers = {p.name: p for p in catalog.providers}
        by_model = {
            model.name: tuple(
                Deployment(
                    id=f"{spec.provider}/{spec.model}",
                    model=model.name,
                    provider=providers[spec.provider],
                    upstream_model=spec.model,
                    tariff=Tariff(spec.price),
                    weight=spec.weight,
                )
                for spec in model.deployments
            )
            for model in catalog.models
        }
        aliases = {alias: model.name for model in catalog.models for alias in model.aliases}
        return cls(
            by_model=by_model | {alias: by_model[name] for alias, name in aliases.items()},
            aliases=aliases,
            regions=frozenset(p.region for p in catalog.providers),
            providers=frozenset(providers),
        )

    @property
    def models(self) -> list[str]:
        """The models' names, in configured order (their aliases left out)."""
        return [name for name in self.by_model if name not in self.aliases]

    def all(self) -> list[Deployment]:
        """Every deployment once (an alias adds none)."""
        return [
            d for name, deployments in self.by_model.items() if name not in self.aliases for d in deployments
        ]
