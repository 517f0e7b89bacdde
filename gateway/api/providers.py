"""`GET /admin/providers`: every deployment with its circuit state and in-flight requests."""

from __future__ import annotations

import msgspec
from litestar import Request, Response, get

from gateway.api.admin.guards import require_admin
from gateway.api.openapi_bodies import documented, json_schema
from gateway.schemas.admin import Page
from gateway.services import services_of


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


@get("/admin/providers", operation_class=documented(response=json_schema(Page[DeploymentHealth])))
async def list_providers(request: Request) -> Response[bytes]:
    services = services_of(request)
    require_admin(request, services.settings.admin_key)
    rows = []
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
            )
        )
    return Response(msgspec.json.encode({"data": rows, "next_cursor": None}), media_type="application/json")


PROVIDER_HANDLERS = [list_providers]
