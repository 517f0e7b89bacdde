"""Batch jobs repository: create a job from its input file (checked, with one row per line) or from
an Anthropic Message Batch's requests, read, page, cancel and delete a team's jobs.

Only the runner moves a job forward and only it moves the counts; the API creates jobs in
`validating` (or `failed`, for a bad file) and asks for a cancel by moving them to `cancelling`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import msgspec
from sqlalchemy import Select, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob, BatchLine
from gateway.db.teams import utcnow
from gateway.errors import Conflict, DirectiveConflict, InvalidRequest, NotFound
from gateway.jobs.files.repository import BATCH_INPUT, delete_file, file_chunks, get_file
from gateway.jobs.files.store import FileStore
from gateway.jobs.input_lines import CHECK_CHUNK_BYTES, InputCheck, InputLine, InputVerdict
from gateway.jobs.pages import page_after
from gateway.jobs.placement import placed_window, placement_rule
from gateway.providers.base import Endpoint
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import NO_DIRECTIVES, Directives, parse_directives
from gateway.routing.policy import eligible_deployments
from gateway.schemas.batch_api import BatchCreate, BatchRequestLine, MessageBatchRequest

CHAT_ENDPOINT = "/v1/chat/completions"
# OpenAI's other batch endpoints (/v1/embeddings, /v1/completions, /v1/responses, ...) are refused:
# the runner sends chat completions only.
ENDPOINTS = frozenset({CHAT_ENDPOINT})
# An Anthropic Message Batch's job: its lines are Messages requests (gateway.api.anthropic.batches)
MESSAGES_ENDPOINT = "/v1/messages"
LINE_ENDPOINTS = {CHAT_ENDPOINT: Endpoint.CHAT, MESSAGES_ENDPOINT: Endpoint.MESSAGES}
COMPLETION_WINDOWS = {"24h": timedelta(hours=24)}  # the only window OpenAI accepts
MESSAGE_BATCH_WINDOW = "24h"  # Anthropic's: a Message Batch expires 24 hours after its creation
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # Anthropic's rule for a Message Batch's custom_id
CANCELLABLE = frozenset({"validating", "in_progress"})
ALREADY_CANCELLING = frozenset({"cancelling", "cancelled"})
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
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
    _check_served(spec)
    stored = await get_file(session, team_id, spec.input_file_id, param="input_file_id")
    if stored.purpose != BATCH_INPUT:
        raise InvalidRequest(
            f"The file {stored.id} has purpose {stored.purpose!r}; a batch's input must have purpose 'batch'.",
            param="input_file_id",
        )
    job = await _new_job(session, request, stored.id)
    verdict = await _add_lines(
        session, job.id, spec.endpoint, file_chunks(session, team_id, stored.id, store=store)
    )
    if not verdict.errors and verdict.model is not None:
        eligible_deployments(verdict.model, request.directives, request.principal, table)
    job.model = verdict.model
    if verdict.errors:
        # The lines added before the first bad one go: a failed batch has none.
        await session.execute(delete(BatchLine).where(BatchLine.job_id == job.id))
        job.status, job.failed_at = "failed", job.created_at
        job.errors = [
            {"code": e.code, "message": e.message, "param": e.param, "line": e.line} for e in verdict.errors
        ]
    else:
        job.request_total = verdict.requests
    await session.flush()
    return job


async def create_message_batch(
    session: AsyncSession,
    principal: Principal,
    requests: Sequence[MessageBatchRequest],
    directives: Directives,
    table: DeploymentTable,
) -> BatchJob:
    """A job for an Anthropic Message Batch: each request one line, checked as an input file's
    lines are. Anthropic refuses a batch whose requests are wrong when it is created: a 400 naming
    the first wrong request, and no job (the caller's transaction rolls back)."""
    for i, request in enumerate(requests):
        if not _CUSTOM_ID.fullmatch(request.custom_id):
            raise InvalidRequest(
                "custom_id must be 1 to 64 letters, digits, underscores or hyphens.",
                param=f"requests[{i}].custom_id",
            )
    spec = BatchCreate("", MESSAGES_ENDPOINT, MESSAGE_BATCH_WINDOW)
    job = await _new_job(session, JobRequest(principal, spec, directives), input_file_id="")
    lines = (
        msgspec.json.encode(BatchRequestLine(r.custom_id, "POST", MESSAGES_ENDPOINT, r.params))
        for r in requests
    )
    verdict = await _add_lines(session, job.id, MESSAGES_ENDPOINT, _in_chunks(lines))
    if verdict.errors:
        first = verdict.errors[0]
        where = "requests" if first.line is None else f"requests[{first.line - 1}]"
        param = where if first.param is None else f"{where}.{first.param.replace('body', 'params', 1)}"
        raise InvalidRequest(f"{where}: {first.message}", param=param, code=first.code)
    if verdict.model is not None:
        eligible_deployments(verdict.model, directives, principal, table)
    job.model, job.request_total = verdict.model, verdict.requests
    await session.flush()
    return job


async def _in_chunks(lines: Iterable[bytes]) -> AsyncIterator[bytes]:
    """Lines as the chunks of a JSONL file."""
    chunk = bytearray()
    for line in lines:
        chunk += line + b"\n"
        if len(chunk) >= CHECK_CHUNK_BYTES:
            yield bytes(chunk)
            chunk = bytearray()
    if chunk:
        yield bytes(chunk)


async def _new_job(session: AsyncSession, request: JobRequest, input_file_id: str) -> BatchJob:
    """The job's row, `validating` and with no line yet."""
    spec, now = request.spec, utcnow()
    job = BatchJob(
        id=new_batch_id(),
        team_id=request.principal.team_id,
        key_id=request.principal.key_id,
        endpoint=spec.endpoint,
        input_file_id=input_file_id,
        completion_window=spec.completion_window,
        metadata_=spec.metadata,
        directives=stored_directives(request.directives),
        request_total=0,
        created_at=now,
        expires_at=now + _window(spec),
        status="validating",
    )
    session.add(job)
    await session.flush()  # the lines' foreign key needs the job row first
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


def _check_served(spec: BatchCreate) -> None:
    """A 400 unless the batch's endpoint and completion window are served."""
    if spec.endpoint not in ENDPOINTS:
        raise InvalidRequest(
            f"The endpoint {spec.endpoint!r} is not supported for batches; "
            f"supported: {', '.join(sorted(ENDPOINTS))}.",
            param="endpoint",
            code="unsupported",
        )
    _window(spec)


def _window(spec: BatchCreate) -> timedelta:
    """How long the job has: 24h, as OpenAI's; 1h to 24h for a job asking for a placement (its
    deadline, `gateway.jobs.placement`)."""
    if placement_rule(spec.metadata) is not None:
        return placed_window(spec.completion_window)
    if spec.completion_window not in COMPLETION_WINDOWS:
        raise InvalidRequest(
            f"completion_window must be one of: {', '.join(COMPLETION_WINDOWS)}.", param="completion_window"
        )
    return COMPLETION_WINDOWS[spec.completion_window]


def _team_jobs(team_id: str, endpoint: str | None = None) -> Select[BatchJob]:
    query = select(BatchJob).where(BatchJob.team_id == team_id)
    return query if endpoint is None else query.where(BatchJob.endpoint == endpoint)


async def get_job(
    session: AsyncSession, team_id: str, job_id: str, *, for_update: bool = False, endpoint: str | None = None
) -> BatchJob:
    """The team's job (of `endpoint`'s lines, when given); NotFound for an unknown one or another
    team's."""
    query = (
        _team_jobs(team_id, endpoint).where(BatchJob.id == job_id).execution_options(populate_existing=True)
    )
    job = (await session.scalars(query.with_for_update() if for_update else query)).first()
    if job is None:
        raise NotFound(f"No batch found with id {job_id!r}.", param="batch_id", code="batch_not_found")
    return job


async def list_jobs(
    session: AsyncSession,
    team_id: str,
    *,
    limit: int,
    after: str | None = None,
    before: str | None = None,
    endpoint: str | None = None,
) -> tuple[list[BatchJob], bool]:
    """A page of the team's jobs (of `endpoint`'s lines, when given), newest first, and whether
    more follow: the older ones `after` a job, or the newer ones `before` it (those nearest it)."""
    query = _team_jobs(team_id, endpoint)
    if before is None:
        return await page_after(session, query, BatchJob, limit=limit, after=after, newest_first=True)
    rows, has_more = await page_after(session, query, BatchJob, limit=limit, after=before, newest_first=False)
    return rows[::-1], has_more


async def cancel_job(
    session: AsyncSession, team_id: str, job_id: str, *, endpoint: str | None = None
) -> BatchJob:
    """Ask the runner to stop the job: `validating`/`in_progress` -> `cancelling`. A job already
    cancelling or cancelled is left as it is; any other status is past cancelling (409).

    The row is locked until the caller commits, so a runner's transition cannot interleave."""
    job = await get_job(session, team_id, job_id, for_update=True, endpoint=endpoint)
    if job.status in CANCELLABLE:
        job.status = "cancelling"
        job.cancelling_at = utcnow()
        await session.flush()
    elif job.status not in ALREADY_CANCELLING:
        raise Conflict(f"Cannot cancel a batch with status {job.status!r}.", param="batch_id")
    return job


async def delete_job(
    session: AsyncSession,
    team_id: str,
    job_id: str,
    *,
    endpoint: str | None = None,
    store: FileStore | None = None,
) -> None:
    """Delete an ended job, its lines and its output and error files (their bytes from `store`
    too); its usage records stay, as the metering's truth. A job still running is a 409: cancel it
    first. The caller commits."""
    job = await get_job(session, team_id, job_id, for_update=True, endpoint=endpoint)
    if job.status not in ENDED:
        raise Conflict(
            f"The batch {job_id!r} is still being processed; cancel it, then delete it once it has ended.",
            param="batch_id",
        )
    for file_id in (job.output_file_id, job.error_file_id):
        if file_id is not None:
            with contextlib.suppress(NotFound):  # the team deleted it already
                await delete_file(session, team_id, file_id, store=store)
    await session.execute(delete(BatchLine).where(BatchLine.job_id == job.id))
    await session.delete(job)
    await session.flush()
