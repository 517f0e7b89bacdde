"""A team's batches as the usage records and batch jobs know them: the batch ids of its records
and its jobs, page by page, and what a batch has used so far (a usage report of its records).

Used by `/v1/gateway/batches` and the console's batch pages."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy import (
    BigInteger,
    DateTime,
    Select,
    String,
    Subquery,
    Table,
    and_,
    cast,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import BatchJob, UsageRecord
from gateway.errors import NotFound
from gateway.metering.reports.usage import TOTAL_FIELDS, UsageQuery, as_utc, usage_report

_records: Table = UsageRecord.__table__  # type: ignore[assignment]
_jobs: Table = BatchJob.__table__  # type: ignore[assignment]


class BatchTotals(msgspec.Struct, kw_only=True):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal = Decimal(0)


class TeamBatch(msgspec.Struct, kw_only=True):
    """One of a team's batches: from its first record (or its job's creation) to its last record."""

    id: str
    created_at: datetime
    last_used_at: datetime | None  # its last record's time; None before it has any
    requests: int
    job_status: str | None  # a Batch API job's status; None for a batch of X-Gateway-Batch requests


async def batch_totals(
    session: AsyncSession, team_id: str, batch_id: str, since: datetime | None
) -> BatchTotals:
    """What a batch has used so far (since its current pin was made, when `since` is given)."""
    query = UsageQuery(start=since, team_id=team_id, batch=batch_id)
    (row,) = await usage_report(session, query)
    return BatchTotals(**{name: getattr(row, name) for name in (*TOTAL_FIELDS, "cost")})


async def team_batches(
    session: AsyncSession, team_id: str, *, limit: int, after: str | None
) -> tuple[list[TeamBatch], bool]:
    """A page of the team's batches, newest first (by creation, then id), and whether more follow.

    `after` is the last id of the previous page, and must be one of the team's batches."""
    batches = _team_batches(team_id)
    query = select(batches)
    if after is not None:
        anchor = (await session.execute(select(batches.c.created_at).where(batches.c.id == after))).first()
        if anchor is None:
            raise NotFound(f"No batch with id {after!r} to list after.", param="after")
        created = batches.c.created_at
        query = query.where(or_(created < anchor[0], and_(created == anchor[0], batches.c.id < after)))
    query = query.order_by(batches.c.created_at.desc(), batches.c.id.desc()).limit(limit + 1)
    rows = [_team_batch(row) for row in (await session.execute(query)).all()]
    return rows[:limit], len(rows) > limit


async def team_batch(session: AsyncSession, team_id: str, batch_id: str) -> TeamBatch | None:
    """One of the team's batches as `team_batches` lists it; None when the team has no such batch."""
    batches = _team_batches(team_id)
    row = (await session.execute(select(batches).where(batches.c.id == batch_id))).first()
    return None if row is None else _team_batch(row)


def _team_batch(row: Any) -> TeamBatch:
    return TeamBatch(
        id=row.id,
        created_at=as_utc(row.created_at),
        last_used_at=None if row.last_used_at is None else as_utc(row.last_used_at),
        requests=int(row.requests),
        job_status=row.job_status,
    )


def _team_batches(team_id: str) -> Subquery:
    """One row per batch id of the team: its records' batch ids and its jobs' ids, merged (a job's
    lines are recorded under its id). A job is created before any of its lines is recorded."""
    c, jobs = _records.c, _jobs.c
    recorded = (
        select(
            c.batch_id.label("id"),
            func.min(c.created_at).label("created_at"),
            func.max(c.created_at).label("last_used_at"),
            func.count().label("requests"),
            cast(null(), String).label("job_status"),
        )
        .where(c.team_id == team_id, c.batch_id.is_not(None))
        .group_by(c.batch_id)
    )
    submitted: Select[Any] = select(
        jobs.id,
        jobs.created_at,
        cast(null(), DateTime(timezone=True)).label("last_used_at"),
        literal(0, BigInteger).label("requests"),
        cast(jobs.status, String).label("job_status"),
    ).where(jobs.team_id == team_id)
    both = union_all(recorded, submitted).subquery()
    return (
        select(
            both.c.id,
            func.min(both.c.created_at).label("created_at"),
            func.max(both.c.last_used_at).label("last_used_at"),
            func.sum(both.c.requests).label("requests"),
            func.max(both.c.job_status).label("job_status"),
        )
        .group_by(both.c.id)
        .subquery()
    )
