"""Catalogs built in code for tests: providers, their deployments and the aliases they serve, with
every field a test does not name left at a default, so that a test spells out only what it is about."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import msgspec

from gateway.settings import (
    BatchSettings,
    Catalog,
    CircuitSettings,
    DeploymentSpec,
    FileSettings,
    JobSettings,
    LimitSettings,
    ModelSpec,
    Price,
    Provider,
    ProviderKind,
    RetrySettings,
    SchedulingSettings,
)

REGION = "eu-west"
# A price as the catalog's YAML writes it ({"input": "0.02"}, USD per million tokens), or a Price
Rates = Price | Mapping[str, str | int | Decimal]


def provider(
    name: str = "up", kind: ProviderKind | str = ProviderKind.OPENAI, *, region: str = REGION, **fields: Any
) -> Provider:
    """A provider of `kind` in `region`; `fields` are its other catalog keys (base_url, capacity...)."""
    return Provider(name=name, kind=ProviderKind(kind), region=region, **fields)


def deployment(
    serving: Provider | str, upstream_model: str | None = None, *, price: Rates | None = None, **fields: Any
) -> DeploymentSpec:
    """A provider serving an alias as `upstream_model` (by default `<provider>-upstream`)."""
    name = serving if isinstance(serving, str) else serving.name
    return DeploymentSpec(
        provider=name, model=upstream_model or f"{name}-upstream", price=as_price(price), **fields
    )


def model(name: str, *deployments: DeploymentSpec) -> ModelSpec:
    """The alias `name`, served by `deployments` in this order."""
    return ModelSpec(name=name, deployments=deployments)


def catalog(
    *providers: Provider,
    models: Iterable[ModelSpec] | None = None,
    retry: RetrySettings = RetrySettings(),
    circuit: CircuitSettings = CircuitSettings(),
    limits: LimitSettings = LimitSettings(),
    batches: BatchSettings = BatchSettings(),
    scheduling: SchedulingSettings = SchedulingSettings(),
    jobs: JobSettings = JobSettings(),
    files: FileSettings = FileSettings(),
) -> Catalog:
    """A catalog of `providers`; without `models`, each provider serves one alias of its own name."""
    if models is None:
        models = [model(p.name, deployment(p)) for p in providers]
    return Catalog(
        providers=providers,
        models=tuple(models),
        retry=retry,
        circuit=circuit,
        limits=limits,
        batches=batches,
        scheduling=scheduling,
        jobs=jobs,
        files=files,
    )


def as_price(rates: Rates | None) -> Price:
    if rates is None:
        return Price()
    if isinstance(rates, Price):
        return rates
    return msgspec.convert(dict(rates), Price)


def base_url(kind: ProviderKind | str, host: str = "up.invalid") -> str:
    """A base URL as `kind` is configured with: an OpenAI-shaped API's ends in /v1, Anthropic's not."""
    return f"http://{host}" if ProviderKind(kind) is ProviderKind.ANTHROPIC else f"http://{host}/v1"
