"""Usage reports over HTTP: `/admin/usage`, `/admin/usage/events` and the team's own `/v1/gateway/usage`."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request, Response, get

from gateway.api.admin.guards import require_admin
from gateway.api.openapi_bodies import documented
from gateway.errors import InvalidRequest
from gateway.metering.reports import (
    ROW_FIELD,
    UsageQuery,
    UsageRow,
    parse_group_by,
    report_csv,
    usage_events,
    usage_report,
)
from gateway.services import services_of

MAX_PAGE = 1000


def _encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat()
    raise NotImplementedError(type(value))


def _json(payload: object) -> Response[bytes]:
    return Response(msgspec.json.encode(payload, enc_hook=_encode), media_type="application/json")


def _moment(params: dict[str, str], name: str) -> datetime | None:
    raw = params.get(name)
    if not raw:
        return None
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), datetime.min.time(), UTC)
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"{name} must be an ISO date or datetime, e.g. 2026-11-01", param=name) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _query(request: Request, team_id: str | None = None) -> UsageQuery:
    params = dict(request.query_params.items())
    return UsageQuery(
        start=_moment(params, "start"),
        end=_moment(params, "end"),
        group_by=parse_group_by(params.get("group_by")),
        team_id=team_id or params.get("team_id") or None,
        key_id=params.get("key_id") or None,
        model=params.get("model") or None,
        provider=params.get("provider") or None,
        batch=params.get("batch") or None,
    )


def _row(row: UsageRow, query: UsageQuery) -> dict[str, Any]:
    shown = {ROW_FIELD[field]: getattr(row, ROW_FIELD[field]) for field in query.group_by}
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


async def _report(request: Request, team_id: str | None) -> Response[Any]:
    query = _query(request, team_id)
    output = request.query_params.get("format", "json")
    if output not in ("json", "csv"):
        raise InvalidRequest("format must be json or csv", param="format")
    async with services_of(request).sessions() as session:
        rows = await usage_report(session, query)
    if output == "csv":
        return Response(report_csv(rows, query.group_by), media_type="text/csv")
    return _json({"object": "list", "data": [_row(r, query) for r in rows], "next_cursor": None})


@get("/admin/usage", operation_class=documented())
async def admin_usage(request: Request) -> Response[Any]:
    require_admin(request, services_of(request).settings.admin_key)
    return await _report(request, None)


@get("/admin/usage/events", operation_class=documented())
async def admin_usage_events(request: Request) -> Response[bytes]:
    require_admin(request, services_of(request).settings.admin_key)
    query = _query(request)
    try:
        limit = int(request.query_params.get("limit", "100"))
    except ValueError:
        raise InvalidRequest("limit must be an integer", param="limit") from None
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", param="limit")
    async with services_of(request).sessions() as session:
        rows, cursor = await usage_events(session, query, request.query_params.get("cursor"), limit)
    return _json({"object": "list", "data": rows, "next_cursor": cursor})


@get("/v1/gateway/usage", operation_class=documented())
async def team_usage(request: Request) -> Response[Any]:
    """The same report, always limited to the caller's own team."""
    services = services_of(request)
    principal = await services.key_cache.authenticate(request.headers.get("authorization"))
    asked = request.query_params.get("team_id")
    if asked and asked != principal.team_id:
        raise InvalidRequest("A team key may only read its own team's usage", param="team_id")
    return await _report(request, principal.team_id)


USAGE_HANDLERS = [admin_usage, admin_usage_events, team_usage]
