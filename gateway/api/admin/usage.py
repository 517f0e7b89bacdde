"""`GET /admin/usage` (the usage report, any team's) and `/admin/usage/events` (the records
themselves, a page at a time), behind the admin guard; the report's parameters are
gateway.api.usage_reports'."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Response, get
from litestar.di import NamedDependency

from gateway.api.admin.guards import admin_guard
from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_query, page_size, text_param
from gateway.api.usage_reports import (
    REPORT_CONTENT,
    REPORT_PARAMS,
    Format,
    ReportParams,
    json_reply,
    report,
    resolved,
)
from gateway.db.session import report_sessions
from gateway.metering.reports.usage import UsageEventRow, usage_events
from gateway.services import ServicesDependency

DEFAULT_PAGE = 100
MAX_PAGE = 1000


class UsageEventPage(msgspec.Struct, kw_only=True):
    """A page of GET /admin/usage/events, as its OpenAPI schema describes it."""

    object: str = "list"
    data: list[UsageEventRow]
    next_cursor: str | None


@get(
    "/admin/usage",
    guards=[admin_guard],
    operation_class=documented(content=REPORT_CONTENT),
    dependencies=REPORT_PARAMS,
)
async def admin_usage(
    services: ServicesDependency, params: NamedDependency[ReportParams], output: Format = None
) -> Response[Any]:
    return await report(services, params, output)


def _event(row: UsageEventRow) -> dict[str, Any]:
    """A record as served: money as plain decimal strings (msgspec would write `1E-8` for a tiny cost)."""
    shown = msgspec.structs.asdict(row)
    shown["cost"], shown["uncached_cost"] = format(row.cost, "f"), format(row.uncached_cost, "f")
    return shown


@get(
    "/admin/usage/events",
    guards=[admin_guard],
    operation_class=documented(response=json_schema(UsageEventPage)),
    dependencies=REPORT_PARAMS,
)
async def admin_usage_events(
    services: ServicesDependency,
    params: NamedDependency[ReportParams],
    limit: Annotated[
        str | None,
        documented_query(
            "Records per page.",
            type="integer",
            maxLength=None,
            minimum=1,
            maximum=MAX_PAGE,
            default=DEFAULT_PAGE,
        ),
    ] = None,
    cursor: Annotated[
        str | None, documented_query("The `next_cursor` of the previous page; absent for the first page.")
    ] = None,
) -> Response[bytes]:
    params.query()  # every parameter checked before any is used
    size = page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE)
    after = text_param(cursor, "cursor")
    async with report_sessions(services)() as session:
        query = await resolved(session, params)
        rows, next_cursor = await usage_events(session, query, after, size)
    return json_reply({"object": "list", "data": [_event(row) for row in rows], "next_cursor": next_cursor})


USAGE_HANDLERS = [admin_usage, admin_usage_events]
