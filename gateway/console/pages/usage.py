"""The usage page (`/ui/usage`) and its CSV (`/ui/usage.csv`): one usage report each, the same
`usage_report` the admin API and `/v1/gateway/usage` answer from, scoped to the viewer's team
unless the viewer is the admin."""

from __future__ import annotations

from datetime import UTC, datetime

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.console import rendering
from gateway.console.auth.sessions import Viewer
from gateway.console.pages.usage_view import GROUPINGS, UsageFilters, table_page, usage_view
from gateway.db import teams
from gateway.db.session import report_sessions
from gateway.metering.reports.usage import report_csv, usage_report
from gateway.services import ServicesDependency

TEAMS_LISTED = 1000  # the teams a filter offers (and whose names label the charts)


async def team_names(session: AsyncSession, viewer: Viewer) -> dict[str, str]:
    """Team id -> name: every live team for the admin (one query), the session's own for a team."""
    if viewer.principal is not None:
        return {viewer.principal.team_id: viewer.principal.team_name}
    rows, _ = await teams.list_teams(session, limit=TEAMS_LISTED, cursor=None)
    return {team.id: team.name for team in rows}


def _filters(
    viewer: Viewer, start: str | None, end: str | None, group: str | None, team: str | None, model: str | None
) -> UsageFilters:
    return UsageFilters.parse(
        start=start,
        end=end,
        group=group,
        team_id=viewer.team_scope(team),
        model=model,
        today=datetime.now(UTC).date(),
    )


@get("/usage")
async def usage_page(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    start: FromQuery[str | None] = None,
    end: FromQuery[str | None] = None,
    group: FromQuery[str | None] = None,
    team: FromQuery[str | None] = None,
    model: FromQuery[str | None] = None,
    page: FromQuery[str | None] = None,
) -> Template:
    filters = _filters(viewer, start, end, group, team, model)
    shown_page = table_page(page)
    async with report_sessions(services)() as session:
        rows = await usage_report(session, filters.query())
        names = await team_names(session, viewer)
    return rendering.page(
        "usage.html",
        viewer,
        "usage",
        view=usage_view(rows, filters, names, shown_page),
        teams=names,
        models=sorted(services.table.models),  # as usage records name them: no alias
        groupings=GROUPINGS,
    )


@get("/usage.csv")
async def usage_csv(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    start: FromQuery[str | None] = None,
    end: FromQuery[str | None] = None,
    group: FromQuery[str | None] = None,
    team: FromQuery[str | None] = None,
    model: FromQuery[str | None] = None,
) -> Response[str]:
    """The page's report as CSV, every digit of the money kept (the admin API's CSV format)."""
    filters = _filters(viewer, start, end, group, team, model)
    query = filters.query()
    async with report_sessions(services)() as session:
        rows = await usage_report(session, query)
    name = f"usage-{filters.first.isoformat()}-{filters.last.isoformat()}.csv"
    return Response(
        report_csv(rows, query.group_by),
        media_type="text/csv",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )


USAGE_PAGE_HANDLERS = [usage_page, usage_csv]
