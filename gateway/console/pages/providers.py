"""The providers page (`/ui/providers`), for the admin only: what `GET /admin/providers` serves, each
deployment's health and circuit and each replica's queue and requests in flight. The queues and the
load are every team's, so a team key is refused here rather than shown a partial picture."""

from __future__ import annotations

from litestar import get
from litestar.di import NamedDependency
from litestar.response import Template

from gateway.api.admin.providers import deployment_health
from gateway.console.auth.sessions import Viewer
from gateway.console.rendering import page
from gateway.services import ServicesDependency


@get("/providers")
async def providers_page(services: ServicesDependency, admin: NamedDependency[Viewer]) -> Template:
    deployments = await deployment_health(services)
    providers = {
        d.provider: d.replicas for d in deployments
    }  # a provider's replicas serve all its deployments
    return page("providers.html", admin, "providers", deployments=deployments, providers=providers)


PROVIDER_PAGE_HANDLERS = [providers_page]
