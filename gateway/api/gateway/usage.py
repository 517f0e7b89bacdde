"""`GET /v1/gateway/usage`: the usage report (gateway.api.usage_reports), always limited to the
caller's own team."""

from __future__ import annotations

from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency

from gateway.api.openapi import documented
from gateway.api.team_key import PrincipalDependency
from gateway.api.usage_reports import REPORT_CONTENT, REPORT_PARAMS, Format, ReportParams, report
from gateway.services import ServicesDependency


@get("/v1/gateway/usage", operation_class=documented(content=REPORT_CONTENT), dependencies=REPORT_PARAMS)
async def team_usage(
    services: ServicesDependency,
    principal: PrincipalDependency,
    params: NamedDependency[ReportParams],
    output: Format = None,
) -> Response[Any]:
    """The same report, always limited to the caller's own team."""
    params.query()  # every parameter checked before the team is looked up
    return await report(services, params, output, team_id=principal.team_id)


USAGE_HANDLERS = [team_usage]
