"""Batch jobs repository: create a job from its input file (checked, with one row per line), read,
page and cancel a team's jobs.

Only the runner moves a job forward and only it moves the counts; the API creates jobs in
`validating` (or `failed`, for a bad file) and asks for a cancel by moving them to `cancelling`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import Select, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob, BatchLine
from gateway.db.teams import utcnow
from gateway.errors import Conflict, DirectiveConflict, InvalidRequest, NotFound
from gateway.jobs.files.repository import BATCH_INPUT, file_chunks, get_file
from gateway.jobs.files.store import FileStore
from gateway.jobs.input_lines import InputCheck, InputLine, InputVerdict
from gateway.jobs.pages import page_after
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import NO_DIRECTIVES, Directives, parse_directives
from gateway.routing.policy import eligible_deployments
from gateway.schemas.batch_api import BatchCreate

CHAT_ENDPOINT = "/v1/chat/completions"
# OpenAI's other batch endpoints (/v1/embeddings, /v1/completions, /v1/responses, ...) are refused:
# the runner sends chat completions only.
ENDPOINTS = frozenset({CHAT_ENDPOINT})
COMPLETION_WINDOWS = {"24h": timedelta(hours=24)}  # the only window OpenAI accepts
CANCELLABLE = frozenset({"validating", "in_progress"})
ALREADY_CANCELLING = frozenset({"cancelling", "cancelled"})
REGION_KEY, PROVIDER_KEY = "gateway_region", "gateway_provider"
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512  # OpenAI's limits

T = TypeVar("T")


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


def check_metadata(metadata: Mapping[str, str] | None) -> None:
    """A 400 naming what breaks OpenAI's limits on a batch's metadata."""
    pairs = metadata or {}
    if len(pairs) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"metadata may hold at most {MAX_METADATA_PAIRS} pairs.", param="metadata")
    for key, value in pairs.items():
        if len(key) > MAX_METADATA_KEY:
            raise InvalidRequest(
                f"metadata keys may be at most {MAX_METADATA_KEY} characters.", param="metadata"
            )
        if len(value) > MAX_METADATA_VALUE:
            raise InvalidRequest(
                f"metadata values may be at most {MAX_METADATA_VALUE} characters.", param=f"metadata.{key}"
            )


def job_directives(headers: Mapping[str, str], metadata: Mapping[str, str] | None) -> Directives:
    """Region and provider for the job's pin, from X-Gateway-Region/-Provider or the metadata keys
    gateway_region/gateway_provider; the two may not disagree. Other directives do not apply."""
    sent = {name: headers[name] for name in ("x-gateway-region", "x-gateway-provider") if name in headers}
    from_headers = parse_directives(sent, None)
    metadata = metadata or {}
    from_metadata = NO_DIRECTIVES
    if REGION_KEY in metadata or PROVIDER_KEY in metadata:
        named = {"region": metadata.get(REGION_KEY), "provider": _names(metadata.get(PROVIDER_KEY))}
        from_metadata = parse_directives({}, named)
    region = _agreed(from_headers.region, from_metadata.region, REGION_KEY)
    providers = _agreed(from_headers.providers or None, from_metadata.providers or None, PROVIDER_KEY)
    return Directives(region=region, providers=providers or ())


def _names(listed: str | None) -> list[str] | None:
    return None if listed is None else [name.strip() for name in listed.split(",")]


def _agreed(from_headers: T | None, from_metadata: T | None, key: str) -> T | None:
    if from_headers is not None and from_metadata is not None and from_headers != from_metadata:
        raise DirectiveConflict(
            f"metadata.{key} differs from the X-Gateway header sent with it", param=f"metadata.{key}"
        )
    return from_headers if from_headers is not None else from_metadata


def stored_directives(directives: Directives) -> dict[str, str] | None:
    """As BatchJob.directives keeps them: providers comma-separated, in order of preference."""
    kept = {"region": directives.region, "provider": ",".join(directives.providers) or None}
    present = {name: value for name, value in kept.items() if value is not None}
    return present or None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A create request once its caller and its directives are known."""

    principal: Principal
    spec: BatchCreate
    directives: Directives


async def create_job(
    session: AsyncSession, request: JobRequest, table: DeploymentTable, *, store: FileStore | None = None
) -> BatchJob:
    """A job for a good input file (`validating`, with its lines) or a bad one (`failed`, with its
    errors); the input's bytes are read from `store` when files are kept there. The request itself
    being wrong (endpoint, window, file, model) is a 4xx and no job.

    The file is read and checked once, a chunk at a time, and each chunk's good lines are added to
    the job as they come: a create holds about a chunk of the file, whatever its size."""
    spec, team_id = request.spec, request.principal.team_id
    window = _window(spec)
    stored = await get_file(session, team_id, spec.input_file_id, param="input_file_id")
    if stored.purpose != BATCH_INPUT:
        raise InvalidRequest(
            f"The file {stored.id} has purpose {stored.purpose!r}; a batch's input must have purpose 'batch'.",
            param="input_file_id",
        )
    now = utcnow()
    job = BatchJob(
        id=new_batch_id(),
        team_id=team_id,
        key_id=request.principal.key_id,
        endpoint=spec.endpoint,
        input_file_id=stored.id,
        completion_window=spec.completion_window,
        metadata_=spec.metadata,
        directives=stored_directives(request.directives),
        request_total=0,
        created_at=now,
        expires_at=now + window,
        status="validating",
    )
    session.add(job)
    await session.flush()  # the lines' foreign key needs the job row first
    verdict = await _add_lines(
        session, job.id, spec.endpoint, file_chunks(session, team_id, stored.id, store=store)
    )
    if not verdict.errors and verdict.model is not None:
        eligible_deployments(verdict.model, request.directives, request.principal, table)
    job.model = verdict.model
    if verdict.errors:
        # The lines added before the first bad one go: a failed batch has none.
        await session.execute(delete(BatchLine).where(BatchLine.job_id == job.id))
        job.status, job.failed_at = "failed", now
        job.errors = [
            {"code": e.code, "message": e.message, "param": e.param, "line": e.line} for e in verdict.errors
        ]
    else:
        job.request_total = verdict.requests
    await session.flush()
    return job


async def _add_lines(
    session: AsyncSession, job_id: str, endpoint: str, chunks: AsyncIterator[bytes]
) -> InputVerdict:
    """Check the file's chunks in order, adding each chunk's good lines to the job (none once a
    line is wrong); what the whole file came to."""
    check = InputCheck(endpoint)
    added = 0
    async for chunk in chunks:
        # Decoding a chunk's JSON lines takes a while: off the event loop.
        good = await asyncio.to_thread(check.feed, chunk)
        added = await _insert_lines(session, job_id, added, good)
    last, verdict = check.verdict()
    await _insert_lines(session, job_id, added, last)
    return verdict


async def _insert_lines(session: AsyncSession, job_id: str, first: int, lines: list[InputLine]) -> int:
    """Add `lines` to the job as its lines `first`, `first + 1`, ...; the next line's number."""
    if lines:
        await session.execute(
            insert(BatchLine),
            [
                {
                    "job_id": job_id,
                    "line_no": line_no,
                    "custom_id": line.custom_id,
                    "body": line.body,
                    "prefix_key": line.prefix_key,
                    "state": "pending",
                    "attempts": 0,
                }
                for line_no, line in enumerate(lines, start=first)
            ],
        )
    return first + len(lines)


def _window(spec: BatchCreate) -> timedelta:
    """The completion window, once the endpoint and the window are known to be served."""
    if spec.endpoint not in ENDPOINTS:
        raise InvalidRequest(
            f"The endpoint {spec.endpoint!r} is not supported for batches; "
            f"supported: {', '.join(sorted(ENDPOINTS))}.",
            param="endpoint",
            code="unsupported",
        )
    window = COMPLETION_WINDOWS.get(spec.completion_window)
    if window is None:
        raise InvalidRequest(
            f"completion_window must be one of: {', '.join(COMPLETION_WINDOWS)}.", param="completion_window"
        )
    return window


def _team_jobs(team_id: str) -> Select[BatchJob]:
    return select(BatchJob).where(BatchJob.team_id == team_id)


async def get_job(session: AsyncSession, team_id: str, job_id: str, *, for_update: bool = False) -> BatchJob:
    """The team's job; NotFound for an unknown one or another team's."""
    query = _team_jobs(team_id).where(BatchJob.id == job_id).execution_options(populate_existing=True)
    job = (await session.scalars(query.with_for_update() if for_update else query)).first()
    if job is None:
        raise NotFound(f"No batch found with id {job_id!r}.", param="batch_id", code="batch_not_found")
    return job


async def list_jobs(
    session: AsyncSession, team_id: str, *, limit: int, after: str | None
) -> tuple[list[BatchJob], bool]:
    """A page of the team's jobs, newest first, and whether more follow."""
    return await page_after(
        session, _team_jobs(team_id), BatchJob, limit=limit, after=after, newest_first=True
    )


async def cancel_job(session: AsyncSession, team_id: str, job_id: str) -> BatchJob:
    """Ask the runner to stop the job: `validating`/`in_progress` -> `cancelling`. A job already
    cancelling or cancelled is left as it is; any other status is past cancelling (409).

    The row is locked until the caller commits, so a runner's transition cannot interleave."""
    job = await get_job(session, team_id, job_id, for_update=True)
    if job.status in CANCELLABLE:
        job.status = "cancelling"
        job.cancelling_at = utcnow()
        await session.flush()
    elif job.status not in ALREADY_CANCELLING:
        raise Conflict(f"Cannot cancel a batch with status {job.status!r}.", param="batch_id")
    return job
