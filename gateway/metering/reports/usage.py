"""Usage reports computed from `usage_records`: grouped totals and raw records page by page (a
team's batches and their totals are in `batch_reports`).

Used by the admin API, `/v1/gateway/usage`, the batch endpoint, the console and `gateway usage`.
A report reads whole UTC days from `usage_daily` (the records' daily totals, kept by triggers in the
statements that write the records: migration 0007) and the records themselves only for the parts of
a day its start or end cuts, so it is the sum of the records exactly, whatever the range. Money is
summed as whole units of 1e-10 USD (the column's scale), exact on SQLite too (where NUMERIC is
stored as a double), and given back as `Decimal`.

Where retention has dropped old records (gateway.metering.storage.retention), whole days before they begin
still come from usage_daily; a part of a day or a page of records from before then is refused
(400) rather than answered with the zeros of records no longer there.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, get_args

import msgspec
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Numeric,
    Select,
    String,
    Table,
    and_,
    cast,
    func,
    literal,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import BatchJob, UsageDaily, UsageRecord
from gateway.errors import InvalidRequest
from gateway.metering.pricing import money_str
from gateway.metering.storage.retention import check_records_kept

GroupField = Literal["team", "key", "model", "provider", "region", "batch", "day", "tier"]
GROUP_FIELDS: tuple[GroupField, ...] = get_args(GroupField)
# The name each group-by field has as a column of usage_records and in a UsageRow.
ROW_FIELD: dict[GroupField, str] = {
    "team": "team_id",
    "key": "key_id",
    "model": "model",
    "provider": "provider",
    "region": "region",
    "batch": "batch_id",
    "day": "day",
    "tier": "service_tier",  # the service tier recorded (gateway.metering.events); None: none
}
TOTAL_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens")
MONEY_SCALE = 10  # usage_records money columns are NUMERIC(20, 10)
# A cursor's request id holds no control character: PostgreSQL refuses NUL in text.
_RequestId = Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[^\x00-\x1f\x7f]*$")]

_records: Table = UsageRecord.__table__  # type: ignore[assignment]
_daily: Table = UsageDaily.__table__  # type: ignore[assignment]
_jobs: Table = BatchJob.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Which records a report covers (start inclusive, end exclusive) and how it groups them."""

    start: datetime | None = None
    end: datetime | None = None
    group_by: tuple[GroupField, ...] = ()
    team_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    provider: str | None = None
    batch: str | None = None


class UsageRow(msgspec.Struct, kw_only=True):
    """One report line: its group-by fields (None when not grouped by) and exact totals."""

    team_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    provider: str | None = None
    region: str | None = None
    batch_id: str | None = None
    day: str | None = None  # YYYY-MM-DD, UTC
    service_tier: str | None = None
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal = Decimal(0)
    saving: Decimal = Decimal(0)  # what prompt caching saved: uncached cost minus cost


class UsageEventRow(msgspec.Struct, kw_only=True):
    """One usage record as stored."""

    request_id: str
    created_at: datetime
    team_id: str
    key_id: str
    model: str
    provider: str
    region: str
    deployment: str
    upstream_model: str
    endpoint: str
    batch_id: str | None
    status: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    usage_source: str
    cost: Decimal
    uncached_cost: Decimal
    latency_ms: float
    ttft_ms: float | None
    error_code: str | None
    queue_ms: float | None  # the wait in the gateway's queue; None for records from before it was kept
    client_request_id: str | None = None  # the client's own X-Request-ID
    service_tier: str | None = None  # the tier served, else asked for (gateway.metering.events)


def parse_group_by(text: str | None) -> tuple[GroupField, ...]:
    """`"team,day"` -> ("team", "day"); unknown names are a 400 naming what exists."""
    fields: list[GroupField] = []
    for name in (text or "").split(","):
        name = name.strip()
        if not name:
            continue
        if name not in GROUP_FIELDS:
            raise InvalidRequest(
                f"unknown group_by field {name!r}; use any of {', '.join(GROUP_FIELDS)}", param="group_by"
            )
        if name not in fields:
            fields.append(name)
    return tuple(fields)


async def usage_report(session: AsyncSession, query: UsageQuery) -> list[UsageRow]:
    """Totals per group, ordered by the group-by fields (no group_by: one row of grand totals)."""
    dialect = session.get_bind().dialect.name
    days, stretches = split_range(query.start, query.end)
    if stretches:
        earliest = [stretch[0] or datetime.min.replace(tzinfo=UTC) for stretch in stretches]
        await check_records_kept(session, min(earliest), "start")
    pieces = [_record_totals(query, stretch, dialect) for stretch in stretches]
    if days is not None:
        pieces.append(_daily_totals(query, days, dialect))
    if len(pieces) == 1:  # grouped already: the usual case, whole days or part of one
        statement = pieces[0]
        groups: list[ColumnElement[Any]] = list(statement.selected_columns)[: len(query.group_by)]
    else:  # the pieces' totals per group, added up
        both = union_all(*pieces).subquery()
        groups = [both.c[ROW_FIELD[field]] for field in query.group_by]
        statement = select(*groups, *(_summed(both.c[name], name) for name in _SUMMED))
        statement = statement.group_by(*groups) if groups else statement
    if groups:
        statement = statement.order_by(*(group.asc().nulls_first() for group in groups))
    return _usage_rows((await session.execute(statement)).all(), query.group_by)


# Whole UTC days from one (inclusive) to another (exclusive); None: unbounded on that side.
DayRange = tuple[date | None, date | None]
# A stretch of time, start inclusive and end exclusive; None: unbounded on that side.
Stretch = tuple[datetime | None, datetime | None]


def split_range(start: datetime | None, end: datetime | None) -> tuple[DayRange | None, list[Stretch]]:
    """A report's range as the whole UTC days in it (None: none) and the stretches of cut days
    on either side of them (empty when the range starts and ends at midnight UTC)."""
    start = None if start is None else as_utc(start)
    end = None if end is None else as_utc(end)
    first = None if start is None else _midnight_from(start)
    last = None if end is None else datetime.combine(end.date(), time(), UTC)
    if start is not None and first is None:  # within the last day a datetime holds
        return None, [(start, end)]
    if first is not None and last is not None and first >= last:  # no whole day in it
        return None, [(start, end)]
    stretches: list[Stretch] = []
    if start is not None and first is not None and start < first:
        stretches.append((start, first))
    if end is not None and last is not None and last < end:
        stretches.append((last, end))
    return (None if first is None else first.date(), None if last is None else last.date()), stretches


def _midnight_from(moment: datetime) -> datetime | None:
    """The first midnight UTC at or after `moment`; None past the last one a datetime holds."""
    midnight = datetime.combine(moment.date(), time(), UTC)
    if midnight == moment:
        return midnight
    try:
        return midnight + timedelta(days=1)
    except OverflowError:
        return None


async def usage_events(
    session: AsyncSession, query: UsageQuery, cursor: str | None, limit: int
) -> tuple[list[UsageEventRow], str | None]:
    """Records in (created_at, request_id) order, `limit` at a time; the cursor resumes after a page."""
    if limit < 1:
        raise InvalidRequest("limit must be at least 1", param="limit")
    if query.start is not None:
        await check_records_kept(session, as_utc(query.start), "start")
    conditions = _conditions(query)
    if cursor is not None:
        after_time, after_id = decode_cursor(cursor)
        created, request_id = _records.c.created_at, _records.c.request_id
        # the bound alone is what an index on created_at can start the page from
        conditions.append(created >= after_time)
        conditions.append(or_(created > after_time, and_(created == after_time, request_id > after_id)))
    statement = (
        select(_records)
        .where(*conditions)
        .order_by(_records.c.created_at, _records.c.request_id)
        .limit(limit + 1)
    )
    rows = [_event_row(row) for row in (await session.execute(statement)).mappings()]
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(page[-1].created_at, page[-1].request_id)


def report_csv(rows: Sequence[UsageRow], group_by: Sequence[GroupField] | None = None) -> str:
    """The report as CSV: the group-by columns (all of them when not said), totals, cost, saving."""
    group_columns = [ROW_FIELD[field] for field in (GROUP_FIELDS if group_by is None else group_by)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*group_columns, *TOTAL_FIELDS, "cost", "saving"])
    for row in rows:
        groups = [getattr(row, column) or "" for column in group_columns]
        totals = [getattr(row, column) for column in TOTAL_FIELDS]
        writer.writerow([*groups, *totals, money_str(row.cost), money_str(row.saving)])
    return out.getvalue()


def encode_cursor(created_at: datetime, request_id: str) -> str:
    payload = msgspec.json.encode([created_at.astimezone(UTC).isoformat(), request_id])
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        payload = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, request_id = msgspec.json.decode(payload, type=tuple[datetime, _RequestId])
        return as_utc(created_at), request_id  # OverflowError: a moment past the year 9999 in UTC
    except (binascii.Error, ValueError, OverflowError, msgspec.DecodeError):
        raise InvalidRequest("cursor is not one this API returned", param="cursor") from None


def _conditions(query: UsageQuery) -> list[ColumnElement[bool]]:
    c = _records.c
    conditions = _filters(_records, query)
    if query.start is not None:
        conditions.append(c.created_at >= as_utc(query.start))
    if query.end is not None:
        conditions.append(c.created_at < as_utc(query.end))
    return conditions


def _filters(table: Table, query: UsageQuery) -> list[ColumnElement[bool]]:
    """The report's filters on usage_records or usage_daily (both name the columns alike)."""
    c = table.c
    conditions: list[ColumnElement[bool]] = []
    for column, wanted in (
        (c.team_id, query.team_id),
        (c.key_id, query.key_id),
        (c.model, query.model),
        (c.provider, query.provider),
        (c.batch_id, query.batch),  # never "", the daily totals' "no batch"
    ):
        if wanted is not None:
            conditions.append(column == wanted)
    return conditions


# A piece of a report: its groups, then these totals (money in whole units of 1e-10 USD).
_SUMMED = (*TOTAL_FIELDS, "cost_units", "uncached_cost_units")


def _record_totals(query: UsageQuery, stretch: Stretch, dialect: str) -> Select[Any]:
    """The report's groups and totals over the records of one stretch of time."""
    c = _records.c
    conditions = _filters(_records, query)
    if stretch[0] is not None:
        conditions.append(c.created_at >= stretch[0])
    if stretch[1] is not None:
        conditions.append(c.created_at < stretch[1])
    groups = [_group_column(field, dialect) for field in query.group_by]
    tokens = [_summed(c[name], name) for name in TOTAL_FIELDS[1:]]
    money = [_money_units(c[name], dialect).label(f"{name}_units") for name in ("cost", "uncached_cost")]
    statement = select(*groups, func.count().label("requests"), *tokens, *money).where(*conditions)
    return statement.group_by(*groups) if groups else statement


def _daily_totals(query: UsageQuery, days: DayRange, dialect: str) -> Select[Any]:
    """The report's groups and totals over whole days, from usage_daily."""
    d = _daily.c
    conditions = _filters(_daily, query)
    if days[0] is not None:
        conditions.append(d.day >= days[0])
    if days[1] is not None:
        conditions.append(d.day < days[1])
    groups = [_daily_group_column(field, dialect) for field in query.group_by]
    totals = [_summed(d[name], name) for name in _SUMMED]
    statement = select(*groups, *totals).where(*conditions)
    return statement.group_by(*groups) if groups else statement


def _group_column(field: GroupField, dialect: str) -> ColumnElement[Any]:
    if field != "day":
        return _records.c[ROW_FIELD[field]].label(ROW_FIELD[field])
    created = _records.c.created_at
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", created), "YYYY-MM-DD").label("day")
    return func.date(created).label("day")  # SQLite stores the UTC wall time as text


def _daily_group_column(field: GroupField, dialect: str) -> ColumnElement[Any]:
    d = _daily.c
    if field in ("batch", "tier"):  # "" in usage_daily's key is null in the records
        column = ROW_FIELD[field]
        return func.nullif(d[column], "").label(column)
    if field != "day":
        return d[ROW_FIELD[field]].label(ROW_FIELD[field])
    if dialect == "postgresql":
        return func.to_char(d.day, "YYYY-MM-DD").label("day")
    return cast(d.day, String).label("day")  # SQLite keeps a date as its ISO text


def _summed(column: ColumnElement[Any], name: str) -> ColumnElement[Any]:
    """A total as the driver gives back a whole number: an int for a count, an integral Decimal
    for money units (PostgreSQL sums BIGINT as NUMERIC); 0 over no rows."""
    whole = _UNITS if name.endswith("_units") else BigInteger()
    return cast(func.coalesce(func.sum(column), 0), whole).label(name)


_UNITS = Numeric(38, 0)


def _money_units(column: ColumnElement[Any], dialect: str) -> ColumnElement[Any]:
    """The sum of a money column in whole units of 1e-10 USD."""
    units: ColumnElement[Any]
    if dialect == "sqlite":  # a double per row: round each to whole units, sum integers
        units = func.sum(cast(func.round(column * 10**MONEY_SCALE), Integer))
    else:
        units = func.sum(column) * literal(10**MONEY_SCALE, BigInteger)
    return cast(func.coalesce(units, 0), _UNITS)


def _money(units: int | Decimal) -> Decimal:
    return Decimal(units).scaleb(-MONEY_SCALE)


def _usage_rows(rows: Sequence[Sequence[Any]], group_by: tuple[GroupField, ...]) -> list[UsageRow]:
    """The rows of a report's statement: its groups, then the `_SUMMED` totals."""
    names = [*(ROW_FIELD[field] for field in group_by), *TOTAL_FIELDS]
    cost_at = len(names)

    def usage_row(row: Sequence[Any]) -> UsageRow:
        cost = _money(row[cost_at])
        return UsageRow(
            **dict(zip(names, row, strict=False)), cost=cost, saving=_money(row[cost_at + 1]) - cost
        )

    return [usage_row(row) for row in rows]


def _event_row(row: Any) -> UsageEventRow:
    values = dict(row)
    values["created_at"] = as_utc(values["created_at"])
    values["latency_ms"] = float(values["latency_ms"])
    for timing in ("ttft_ms", "queue_ms"):
        if values[timing] is not None:
            values[timing] = float(values[timing])
    return UsageEventRow(**values)


def as_utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime (SQLite gives those back) is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
