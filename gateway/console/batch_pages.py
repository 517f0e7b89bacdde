"""Batches and batch jobs: `/ui/batches` (a team's batches with their totals, and its jobs with
their progress), `/ui/fragments/jobs` (the jobs part alone, which the page polls while a job runs) and
`/ui/batches/{id}` (one batch: pin, job, totals and throughput).

The same functions as `/v1/gateway/batches` and `/v1/batches` read them, a fixed number of queries
a page: the batches of a page are totalled by one report grouped by batch, from the oldest of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api.batch_jobs import batch_object
from gateway.console.rendering import page
from gateway.console.sessions import Viewer
from gateway.console.usage_pages import team_names
from gateway.errors import InvalidRequest, NotFound
from gateway.jobs.batches import get_job, list_jobs
from gateway.metering.batch_reports import TeamBatch, batch_totals, team_batch, team_batches
from gateway.metering.reports import UsageQuery, UsageRow, usage_report
from gateway.metering.throughput import batch_throughput
from gateway.routing.directives import BATCH_ID
from gateway.schemas.batch_api import Batch
from gateway.services import services_of

BATCHES_A_PAGE = 25
JOBS_A_PAGE = 20
RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


@dataclass(frozen=True, slots=True)
class BatchLine:
    """A batch as the list shows it: what `team_batches` lists, and its totals."""

    batch: TeamBatch
    totals: UsageRow


@dataclass(frozen=True, slots=True)
class JobLine:
    job: Batch

    @property
    def done(self) -> int:
        return self.job.request_counts.completed + self.job.request_counts.failed

    @property
    def running(self) -> bool:
        return self.job.status in RUNNING


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
    return [JobLine(batch_object(job)) for job in jobs], more


async def _batches(session: AsyncSession, team_id: str, after: str | None) -> tuple[list[BatchLine], bool]:
    listed, more = await team_batches(session, team_id, limit=BATCHES_A_PAGE, after=after)
    if not listed:
        return [], more
    # Every record of a listed batch is at or after its creation: one report from the oldest covers all.
    since = min(batch.created_at for batch in listed)
    rows = await usage_report(session, UsageQuery(start=since, team_id=team_id, group_by=("batch",)))
    totals = {row.batch_id: row for row in rows}
    return [BatchLine(batch, totals.get(batch.id, UsageRow())) for batch in listed], more


@get("/batches")
async def batches_page(
    request: Request,
    viewer: NamedDependency[Viewer],
    team: FromQuery[str | None] = None,
    after: FromQuery[str | None] = None,
    jobs_after: FromQuery[str | None] = None,
) -> Template:
    context: dict[str, Any] = {"batches": [], "more_batches": False, "jobs": [], "more_jobs": False}
    async with services_of(request).sessions() as session:
        team_id, names = await _team(session, viewer, team)
        if team_id is not None:
            context["batches"], context["more_batches"] = await _batches(session, team_id, after)
            context["jobs"], context["more_jobs"] = await _jobs(session, team_id, jobs_after)
    context |= _links(viewer, team_id, jobs_after)
    return page("batches.html", viewer, "batches", team_id=team_id, teams=names, **context)


@get("/fragments/jobs")
async def jobs_fragment(
    request: Request,
    viewer: NamedDependency[Viewer],
    team: FromQuery[str | None] = None,
    jobs_after: FromQuery[str | None] = None,
) -> Template:
    """The jobs table alone: what the batches page swaps in while a job runs."""
    async with services_of(request).sessions() as session:
        team_id, _ = await _team(session, viewer, team)
        jobs, more = await _jobs(session, team_id, jobs_after) if team_id else ([], False)
    context = {"team_id": team_id, "jobs": jobs, "more_jobs": more} | _links(viewer, team_id, jobs_after)
    return page("_jobs.html", viewer, "batches", **context)


@get("/batches/{batch_id:str}")
async def batch_page(
    request: Request,
    viewer: NamedDependency[Viewer],
    batch_id: FromPath[str],
    team: FromQuery[str | None] = None,
) -> Template:
    """One batch as `GET /v1/gateway/batches/{id}` shows it, ended batches too (their whole history)."""
    services = services_of(request)
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
