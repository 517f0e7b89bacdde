"""Batches and batch jobs: `/ui/batches` (a team's batches with their totals, and its jobs with
their progress), `/ui/fragments/jobs` (the jobs part alone, which the page polls while a job runs) and
`/ui/batches/{id}` (one batch: pin, job, totals and throughput).

The same functions as `/v1/gateway/batches` and `/v1/batches` read them, a fixed number of queries
a page: the batches of a page are totalled by one report grouped by batch, from the oldest of them,
and the jobs' deployments and output tokens are read from their records by one grouped query.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Template
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api.openai.batches import batch_object
from gateway.console.auth.sessions import Viewer
from gateway.console.pages.usage import team_names
from gateway.console.rendering import page
from gateway.db.models import UsageRecord
from gateway.errors import InvalidRequest, NotFound
from gateway.jobs.repository import get_job, list_jobs
from gateway.metering.reports.batches import TeamBatch, batch_totals, team_batch, team_batches
from gateway.metering.reports.throughput import batch_throughput
from gateway.metering.reports.usage import UsageQuery, UsageRow, usage_report
from gateway.routing.directives import BATCH_ID
from gateway.schemas.batch_api import Batch
from gateway.services import ServicesDependency

BATCHES_A_PAGE = 25
JOBS_A_PAGE = 20
RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A batch as the list shows it: what `team_batches` lists, and its totals."""

    batch: TeamBatch
    totals: UsageRow


@dataclass(frozen=True, slots=True)
class JobRecords:
    """What a job's usage records say of it: where its lines ran and the tokens they produced."""

    deployments: tuple[str, ...] = ()
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JobLine:
    job: Batch
    records: JobRecords = JobRecords()

    @property
    def done(self) -> int:
        return self.job.request_counts.completed + self.job.request_counts.failed

    @property
    def running(self) -> bool:
        return self.job.status in RUNNING

    @property
    def deployment(self) -> str | None:
        """The job's pin, or where its records say its lines ran (a job the gateway runs keeps its
        pin in the batch pin store, not on the job)."""
        return self.job.gateway.deployment or ", ".join(self.records.deployments) or None

    def _running_s(self, now: float) -> float | None:
        """Seconds from the job's start to its end (now while it runs); None before it started."""
        job = self.job
        started = job.in_progress_at if isinstance(job.in_progress_at, int) else None
        ends = (job.finalizing_at, job.completed_at, job.cancelled_at, job.failed_at, job.expired_at)
        ended = next((moment for moment in ends if isinstance(moment, int)), None)
        if started is None:
            return None
        span = (now if ended is None else ended) - started
        return span if span > 0 else None

    def lines_per_s(self, now: float) -> float | None:
        span = self._running_s(now)
        return None if span is None or not self.done else self.done / span

    def tokens_per_s(self, now: float) -> float | None:
        """Output (completion) tokens a second over the job's running time."""
        span = self._running_s(now)
        return (
            None
            if span is None or not self.records.completion_tokens
            else self.records.completion_tokens / span
        )


async def _team(
    session: AsyncSession, viewer: Viewer, wanted: str | None
) -> tuple[str | None, dict[str, str]]:
    """The team the page shows (the admin's choice, else the first team) and the teams to choose from."""
    names = await team_names(session, viewer)
    chosen = viewer.team_scope(wanted)
    if chosen is None:
        chosen = next(iter(names), None)
    elif viewer.admin and chosen not in names:
        raise NotFound(f"No team with id {chosen!r}.", param="team")
    return chosen, names


def _links(viewer: Viewer, team_id: str | None, jobs_after: str | None) -> dict[str, Any]:
    """The query that names the team in links (the admin's choice; a team's session needs none), and
    the URL the page polls for its jobs."""
    team = {"team": team_id} if viewer.admin and team_id else {}
    jobs = team | ({"jobs_after": jobs_after} if jobs_after else {})
    return {
        "team_query": f"?{urlencode(team)}" if team else "",
        "jobs_url": f"/ui/fragments/jobs?{urlencode(jobs)}",
    }


async def _jobs(session: AsyncSession, team_id: str, after: str | None) -> tuple[list[JobLine], bool]:
    jobs, more = await list_jobs(session, team_id, limit=JOBS_A_PAGE, after=after)
    objects = [batch_object(job) for job in jobs]
    records = await _job_records(session, team_id, objects)
    return [JobLine(job, records.get(job.id, JobRecords())) for job in objects], more


async def _job_records(session: AsyncSession, team_id: str, jobs: list[Batch]) -> dict[str, JobRecords]:
    """Each job's deployments and output tokens, from its records (all at or after its creation)."""
    if not jobs:
        return {}
    r = UsageRecord
    since = datetime.fromtimestamp(min(job.created_at for job in jobs), UTC)
    statement = (
        select(r.batch_id, r.deployment, func.sum(r.completion_tokens))
        .where(r.team_id == team_id, r.batch_id.in_([job.id for job in jobs]), r.created_at >= since)
        .group_by(r.batch_id, r.deployment)
        .order_by(r.batch_id, r.deployment)
    )
    found: dict[str, JobRecords] = {}
    for batch_id, deployment, tokens in await session.execute(statement):
        if batch_id is None:
            continue
        seen = found.get(batch_id, JobRecords())
        found[batch_id] = JobRecords(
            (*seen.deployments, deployment), seen.completion_tokens + int(tokens or 0)
        )
    return found


async def _batches(session: AsyncSession, team_id: str, after: str | None) -> tuple[list[BatchRow], bool]:
    listed, more = await team_batches(session, team_id, limit=BATCHES_A_PAGE, after=after)
    if not listed:
        return [], more
    # Every record of a listed batch is at or after its creation: one report from the oldest covers all.
    since = min(batch.created_at for batch in listed)
    rows = await usage_report(session, UsageQuery(start=since, team_id=team_id, group_by=("batch",)))
    totals = {row.batch_id: row for row in rows}
    return [BatchRow(batch, totals.get(batch.id, UsageRow())) for batch in listed], more


@get("/batches")
async def batches_page(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    team: FromQuery[str | None] = None,
    after: FromQuery[str | None] = None,
    jobs_after: FromQuery[str | None] = None,
) -> Template:
    context: dict[str, Any] = {"batches": [], "more_batches": False, "jobs": [], "more_jobs": False}
    async with services.sessions() as session:
        team_id, names = await _team(session, viewer, team)
        if team_id is not None:
            context["batches"], context["more_batches"] = await _batches(session, team_id, after)
            context["jobs"], context["more_jobs"] = await _jobs(session, team_id, jobs_after)
    context |= _links(viewer, team_id, jobs_after)
    return page("batches.html", viewer, "batches", team_id=team_id, teams=names, now=time.time(), **context)


@get("/fragments/jobs")
async def jobs_fragment(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    team: FromQuery[str | None] = None,
    jobs_after: FromQuery[str | None] = None,
) -> Template:
    """The jobs table alone: what the batches page swaps in while a job runs."""
    async with services.sessions() as session:
        team_id, _ = await _team(session, viewer, team)
        jobs, more = await _jobs(session, team_id, jobs_after) if team_id else ([], False)
    context: dict[str, Any] = {"team_id": team_id, "jobs": jobs, "more_jobs": more, "now": time.time()}
    context |= _links(viewer, team_id, jobs_after)
    return page("_jobs.html", viewer, "batches", **context)


@get("/batches/{batch_id:str}")
async def batch_page(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    batch_id: FromPath[str],
    team: FromQuery[str | None] = None,
) -> Template:
    """One batch as `GET /v1/gateway/batches/{id}` shows it, ended batches too (their whole history)."""
    team_id = viewer.team_scope(team)
    if team_id is None:
        raise InvalidRequest("Choose the team whose batch to show.", param="team")
    if not BATCH_ID.fullmatch(batch_id):
        raise NotFound(f"No batch {batch_id!r} for this team.", param="batch_id")
    pin = await services.pins.touch(team_id, batch_id, recent=False)
    async with services.sessions() as session:
        listed = await team_batch(session, team_id, batch_id)
        if listed is None and pin is None:
            raise NotFound(f"No batch {batch_id!r} for this team.", param="batch_id")
        job = None
        if listed is not None and listed.job_status is not None:
            job = JobLine(batch_object(await get_job(session, team_id, batch_id)))
        since = None if pin is None else datetime.fromtimestamp(pin.created_at, UTC)
        totals = await batch_totals(session, team_id, batch_id, since)
        throughput = await batch_throughput(session, team_id, batch_id, since)
    return page(
        "batch.html",
        viewer,
        "batches",
        batch_id=batch_id,
        team_id=team_id,
        listed=listed,
        pin=pin,
        job=job,
        totals=totals,
        throughput=throughput,
        **_links(viewer, team_id, None),
    )


BATCH_PAGE_HANDLERS = [batches_page, jobs_fragment, batch_page]
