"""The usage report over HTTP, shared by `/admin/usage` (gateway.api.admin.usage) and a team's own
`/v1/gateway/usage` (gateway.api.gateway.usage): its query parameters, declared (so the OpenAPI
document lists them) and checked by `gateway.api.query_params` once the caller is known, and its
answer as JSON or CSV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

import msgspec
from litestar import Response
from litestar.di import Provide
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api.openapi import json_schema
from gateway.api.query_params import documented_query, moment_param, text_param
from gateway.db.session import report_sessions
from gateway.db.teams import reported_team_id, team_names
from gateway.errors import InvalidRequest, PermissionDenied
from gateway.metering.reports.usage import (
    GROUP_FIELDS,
    ROW_FIELD,
    UsageQuery,
    UsageRow,
    parse_group_by,
    report_csv,
    usage_report,
)
from gateway.services import Services

Format = Annotated[
    str | None,
    documented_query("The answer's format: json (default) or csv.", name="format", enum=["json", "csv"]),
]
# An ISO date or an RFC 3339 datetime, as `moment_param` reads them.
MOMENT = {
    "examples": ["2026-11-01", "2026-11-01T12:00:00Z"],
    "anyOf": [{"format": "date"}, {"format": "date-time"}, {"maxLength": 0}],  # empty: not given
    "pattern": None,
}
FIELDS = ", ".join(GROUP_FIELDS)
_FIELD = f"[ ]*(?:(?:{'|'.join(GROUP_FIELDS)})[ ]*)?"
GROUP_BY = {"examples": ["team,model", "day"], "pattern": f"^{_FIELD}(?:,{_FIELD})*$"}


class UsageReportRow(msgspec.Struct, kw_only=True):
    """A report line as its OpenAPI schema describes it: the group-by fields asked for, then totals."""

    team_id: str | None = None
    team_name: str | None = None  # beside team_id whenever the report groups by team
    key_id: str | None = None
    model: str | None = None
    provider: str | None = None
    region: str | None = None
    batch_id: str | None = None
    day: str | None = None  # YYYY-MM-DD, UTC
    service_tier: str | None = None  # group_by=tier: the tier served (else asked for); null: none
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost: str  # USD, exact
    saving: str  # what cached tokens saved, USD


class UsageReport(msgspec.Struct, kw_only=True):
    """GET /admin/usage and /v1/gateway/usage as JSON (one page: `next_cursor` is always null)."""

    object: str = "list"
    data: list[UsageReportRow]
    next_cursor: str | None


# JSON, or with `format=csv` the same rows as CSV: a header line of the group-by columns, the
# totals, cost and saving.
REPORT_CONTENT = {
    "application/json": {"schema": json_schema(UsageReport)},
    "text/csv": {"schema": {"type": "string"}},
}


def _encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat()
    raise NotImplementedError(type(value))


def json_reply(payload: object) -> Response[bytes]:
    return Response(msgspec.json.encode(payload, enc_hook=_encode), media_type="application/json")


@dataclass(frozen=True, slots=True)
class ReportParams:
    """A report's query parameters as sent, not yet checked."""

    start: str | None
    end: str | None
    group_by: str | None
    team_id: str | None
    key_id: str | None
    model: str | None
    provider: str | None
    batch: str | None
    team: str | None = None

    def team_named(self) -> tuple[str, str] | None:
        """(parameter, team id or name) of the team filter: `team_id` or its alias `team`."""
        team_id, team = text_param(self.team_id, "team_id"), text_param(self.team, "team")
        if team_id is not None and team is not None and team_id != team:
            raise InvalidRequest("Give `team_id` or `team`, not both.", param="team")
        if team_id is not None:
            return "team_id", team_id
        return ("team", team) if team is not None else None

    def query(self) -> UsageQuery:
        """The report they ask for; a 400 naming the first parameter that is not usable. A team
        named by its name is resolved to its id by `resolved`."""
        named = self.team_named()
        return UsageQuery(
            start=moment_param(self.start, "start"),
            end=moment_param(self.end, "end"),
            group_by=parse_group_by(text_param(self.group_by, "group_by")),
            team_id=named[1] if named else None,
            key_id=text_param(self.key_id, "key_id"),
            model=text_param(self.model, "model"),
            provider=text_param(self.provider, "provider"),
            batch=text_param(self.batch, "batch"),
        )


def report_params(
    start: Annotated[
        str | None,
        documented_query("From this moment, inclusive: an ISO date (midnight UTC) or datetime.", **MOMENT),
    ] = None,
    end: Annotated[
        str | None,
        documented_query("Up to this moment, exclusive: an ISO date (midnight UTC) or datetime.", **MOMENT),
    ] = None,
    group_by: Annotated[
        str | None,
        documented_query(f"Comma-separated, any of: {FIELDS} (UTC days).", **GROUP_BY),
    ] = None,
    team_id: Annotated[str | None, documented_query("Only this team's usage: its id or its name.")] = None,
    key_id: Annotated[str | None, documented_query("Only this API key's usage.")] = None,
    model: Annotated[str | None, documented_query("Only this model (the name clients send).")] = None,
    provider: Annotated[str | None, documented_query("Only this provider's deployments.")] = None,
    batch: Annotated[str | None, documented_query("Only this batch id's usage.")] = None,
    team: Annotated[str | None, documented_query("`team_id` by another name: a team's name or id.")] = None,
) -> ReportParams:
    return ReportParams(start, end, group_by, team_id, key_id, model, provider, batch, team)


async def resolved(session: AsyncSession, params: ReportParams) -> UsageQuery:
    """The report's query with its team filter as an id, whichever way the caller named the team."""
    query, named = params.query(), params.team_named()
    if named is None:
        return query
    return replace(query, team_id=await reported_team_id(session, named[1], param=named[0]))


REPORT_PARAMS = {"params": Provide(report_params, sync_to_thread=False)}


def _row(row: UsageRow, query: UsageQuery, names: dict[str, str]) -> dict[str, Any]:
    shown = {ROW_FIELD[field]: getattr(row, ROW_FIELD[field]) for field in query.group_by}
    if "team" in query.group_by:
        shown["team_name"] = names.get(row.team_id or "")
    totals = msgspec.structs.asdict(row)
    return (
        shown
        | {
            name: totals[name]
            for name in (
                "requests",
                "prompt_tokens",
                "completion_tokens",
                "cached_tokens",
                "cache_write_tokens",
            )
        }
        | {"cost": format(row.cost, "f"), "saving": format(row.saving, "f")}
    )


async def report(
    services: Services, params: ReportParams, output: str | None, *, team_id: str | None = None
) -> Response[Any]:
    """The report `params` ask for; `team_id`: limited to this team whatever they ask."""
    if output not in (None, "json", "csv"):
        raise InvalidRequest("`format` must be json or csv.", param="format")
    async with report_sessions(services)() as session:
        if team_id is None:
            query = await resolved(session, params)
        else:
            query = replace(params.query(), team_id=await _own_team(session, params, team_id))
        rows = await usage_report(session, query)
        names = (
            await team_names(session, {r.team_id for r in rows if r.team_id})
            if "team" in query.group_by
            else {}
        )
    if output == "csv":
        return Response(report_csv(rows, query.group_by), media_type="text/csv")
    return json_reply({"object": "list", "data": [_row(r, query, names) for r in rows], "next_cursor": None})


async def _own_team(session: AsyncSession, params: ReportParams, team_id: str) -> str:
    """`team_id`, when the filter names no team or the caller's own (by id or name); a 403 for any
    other, whether or not a team of that name exists (a team key learns nothing of other teams)."""
    named = params.team_named()
    if named is not None and named[1] != team_id:
        own_name = (await team_names(session, {team_id})).get(team_id)
        if named[1] != own_name:
            raise PermissionDenied("A team key may only read its own team's usage", param=named[0])
    return team_id
