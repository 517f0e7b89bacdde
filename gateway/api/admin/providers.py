"""`GET /admin/providers`: every deployment with its circuit state, in-flight requests, and each
replica of its provider: in flight and queued here, held by every process, the server's own load."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Response, get

from gateway.api.admin.guards import admin_guard
from gateway.api.openapi import documented, json_schema
from gateway.schemas.admin import Page
from gateway.services import Services, ServicesDependency


class ReplicaLoad(msgspec.Struct, omit_defaults=True):
    url: str
    in_flight: int  # this process's
    tokens_in_flight: int | None = None
    queued: dict[str, int] | None = None  # by priority class
    max_concurrency: int | None = None
    max_tokens_in_flight: int | None = None
    all_processes: dict[str, int] | None = None  # in_flight and tokens_in_flight, every process
    server_load: dict[str, Any] | None = None  # the replica's /metrics, with load_metrics


class DeploymentHealth(msgspec.Struct):
    deployment: str
    model: str
    provider: str
    kind: str
    region: str
    circuit: str
    consecutive_failures: int
    healthy: bool
    in_flight: int
    replicas: list[ReplicaLoad]


@get(
    "/admin/providers",
    guards=[admin_guard],
    operation_class=documented(response=json_schema(Page[DeploymentHealth])),
)
async def list_providers(services: ServicesDependency) -> Response[bytes]:
    rows = await deployment_health(services)
    return Response(msgspec.json.encode({"data": rows, "next_cursor": None}), media_type="application/json")


async def deployment_health(services: Services) -> list[DeploymentHealth]:
    """Every deployment's health and its provider's replicas (the console's providers page too)."""
    rows = []
    scheduler = services.executor.scheduler
    replicas = {
        name: msgspec.convert(await scheduler.snapshot(name), list[ReplicaLoad])
        for name in scheduler.providers
    }
    for deployment in services.table.all():
        state, failures = services.health.state_of(deployment.id)
        rows.append(
            DeploymentHealth(
                deployment=deployment.id,
                model=deployment.model,
                provider=deployment.provider.name,
                kind=deployment.provider.kind.value,
                region=deployment.region,
                circuit=state.value,
                consecutive_failures=failures,
                healthy=state.value != "open",
                in_flight=services.health.in_flight.get(deployment.id, 0),
                replicas=replicas[deployment.provider.name],
            )
        )
    return rows


PROVIDER_HANDLERS = [list_providers]
