"""The SQL of running jobs: claims and their leases, line outcomes (the ledger), final files.

Every write after a claim is guarded by the claim's fencing token, so a process that lost its
lease can never write again; a line's outcome, its usage record and the job's counts are one
transaction, so a line is metered exactly once and the counts never run ahead of the outcomes.
Each run of a line is written down before it is sent (`begin_attempts`) and cleared with whatever
ends it: its outcome, its record without one (`close_attempt`), or, once its process is known dead,
an estimated record (`record_orphans`). Each function that writes commits its own transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Insert, Table, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.principal import Principal
from gateway.db.keys import principal_of
from gateway.db.models import ApiKey, BatchJob, BatchLine, Team, UsageRecord
from gateway.jobs.files.repository import BATCH_ERRORS, BATCH_OUTPUT, store_file
from gateway.jobs.files.store import FileStore
from gateway.jobs.output_files import JobFiles, LineRecord
from gateway.metering.events import UsageEvent
from gateway.metering.storage.writer import record_row
from gateway.providers.base import Endpoint

# The statuses a runner works on; every other status is final.
RUNNABLE = ("validating", "in_progress", "finalizing", "cancelling")
SUCCEEDED, FAILED, PENDING = "succeeded", "failed", "pending"
_RECORDS: Table = UsageRecord.__table__  # type: ignore[assignment]


class LeaseLost(Exception):
    """Another process holds the job now: this one must stop without writing anything more."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A job as this process holds it: writes carry `fencing_token`."""

    job_id: str
    team_id: str
    fencing_token: int
    status: str  # at the moment of the claim


@dataclass(frozen=True, slots=True)
class PendingLine:
    line_no: int
    body: str  # the request body, JSON text
    prefix_key: str  # shared by the lines whose prompts start the same
    runs: int = 0  # the runs started so far: the next one's request id is `line_request_id(..., runs + 1)`
    endpoint: Endpoint = Endpoint.CHAT  # what its body is: its job's endpoint


def line_request_id(job_id: str, line_no: int, run: int) -> str:
    """The request id of a line's `run`-th run (from 1), the id of its usage record: `{job}-{line}`
    for the first, `{job}-{line}-{run}` for a re-run (its process died, or the deployment failed
    it), which has a record of its own."""
    return f"{job_id}-{line_no}" if run <= 1 else f"{job_id}-{line_no}-{run}"


@dataclass(frozen=True, slots=True)
class Attempt:
    """A run of a line as written before it was sent, found with no outcome."""

    line_no: int
    request_id: str
    started_at: datetime
    deployment: str | None  # the deployment id it went to
    body: str  # the line's request, for the estimate of its prompt


@dataclass(frozen=True, slots=True)
class LineOutcome:
    """What one run of a line came to, as the ledger stores it."""

    line_no: int
    state: str  # succeeded or failed
    status_code: int
    response: str  # the answer's body (a chat completion, or an {"error": ...} object) as JSON text
    request_id: str
    attempts: int


def _rows(result: object) -> int:
    return cast(CursorResult[Any], result).rowcount


def _held_by(claim: Claim) -> Any:
    return (BatchJob.id == claim.job_id) & (BatchJob.fencing_token == claim.fencing_token)


# Why a job stopped before its lines ran: its key may no longer send anything.
KEY_REVOKED, KEY_EXPIRED, TEAM_DELETED, KEY_GONE = (
    "api_key_revoked",
    "api_key_expired",
    "team_deleted",
    "api_key_not_found",
)


@dataclass(frozen=True, slots=True)
class Standing:
    """The key a job runs as, as it stands now: its principal (limits, budgets, weight, read
    afresh), or why its lines may no longer be sent."""

    principal: Principal | None
    stopped: str | None = None  # KEY_REVOKED, KEY_EXPIRED, TEAM_DELETED or KEY_GONE


async def key_standing(session: AsyncSession, key_id: str, now: float) -> Standing:
    """Who runs the job's lines (the key that created it, with its team's limits and weight), and
    whether it still may: what authentication would say of the key now. `now`: unix seconds."""
    query = select(ApiKey, Team).join(Team, Team.id == ApiKey.team_id).where(ApiKey.id == key_id)
    row = (await session.execute(query)).first()
    if row is None:
        return Standing(None, KEY_GONE)
    key, team = row
    principal = principal_of(key, team)
    if team.deleted_at is not None:
        return Standing(principal, TEAM_DELETED)
    if key.revoked_at is not None:
        return Standing(principal, KEY_REVOKED)
    if principal.expired(now):
        return Standing(principal, KEY_EXPIRED)
    return Standing(principal)


async def claim_job(
    session: AsyncSession, owner: str, lease_s: float, now: datetime, held: Collection[str] = ()
) -> Claim | None:
    """Take one runnable job whose lease is free or expired, in one statement; None if none is.

    PostgreSQL skips a row another claimer has locked this instant instead of waiting for it."""
    candidate = (
        select(BatchJob.id)
        .where(
            BatchJob.status.in_(RUNNABLE),
            or_(BatchJob.lease_expires_at.is_(None), BatchJob.lease_expires_at < now),
            BatchJob.id.not_in(list(held)),
        )
        .order_by(BatchJob.created_at, BatchJob.id)
        .limit(1)
    )
    if session.get_bind().dialect.name == "postgresql":
        candidate = candidate.with_for_update(skip_locked=True)
    statement = (
        update(BatchJob)
        .where(BatchJob.id == candidate.scalar_subquery())
        .values(
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            fencing_token=BatchJob.fencing_token + 1,
        )
        .returning(BatchJob.id, BatchJob.team_id, BatchJob.fencing_token, BatchJob.status)
        .execution_options(synchronize_session=False)
    )
    row = (await session.execute(statement)).first()
    await session.commit()
    return None if row is None else Claim(row.id, row.team_id, row.fencing_token, row.status)


async def renew_lease(session: AsyncSession, claim: Claim, lease_s: float, now: datetime) -> str | None:
    """Extend the lease; the job's status now (a cancel shows here), or None: the lease is lost, or
    the job has just been given its final status."""
    statement = (
        update(BatchJob)
        .where(_held_by(claim), BatchJob.status.in_(RUNNABLE))
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
        .returning(BatchJob.status)
        .execution_options(synchronize_session=False)
    )
    status = (await session.execute(statement)).scalar()
    await session.commit()
    return status


async def job_status(session: AsyncSession, claim: Claim) -> str | None:
    """The job's status, read by its key alone (a cancel shows here between renewals); None when
    another claim holds the job now."""
    query = select(BatchJob.status).where(_held_by(claim))
    return (await session.execute(query)).scalar()


async def release_lease(session: AsyncSession, claim: Claim) -> None:
    """Give the job up now (a graceful stop), so that another process need not wait for the lease."""
    statement = (
        update(BatchJob)
        .where(_held_by(claim))
        .values(lease_owner=None, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    await session.execute(statement)
    await session.commit()


async def load_job(session: AsyncSession, job_id: str) -> BatchJob:
    job = await session.get(BatchJob, job_id, populate_existing=True)
    if job is None:
        raise LookupError(f"batch job {job_id} is gone")
    return job


async def move_job(
    session: AsyncSession, claim: Claim, status: str, now: datetime, *, expect: Collection[str]
) -> bool:
    """Move the job from one of `expect` to `status`, stamping `{status}_at`; False if the lease
    is lost or the job had moved on (a cancel)."""
    statement = (
        update(BatchJob)
        .where(_held_by(claim), BatchJob.status.in_(list(expect)))
        .values({"status": status, f"{status}_at": now})
        .execution_options(synchronize_session=False)
    )
    moved = _rows(await session.execute(statement)) == 1
    await session.commit()
    return moved


async def set_paused(session: AsyncSession, claim: Claim, reason: str | None) -> bool:
    """Say why the job waits (a failing pinned deployment), or None once it runs again."""
    statement = (
        update(BatchJob)
        .where(_held_by(claim))
        .values(paused_reason=reason)
        .execution_options(synchronize_session=False)
    )
    held = _rows(await session.execute(statement)) == 1
    await session.commit()
    return held


async def pending_lines(
    session: AsyncSession, job_id: str, endpoint: Endpoint = Endpoint.CHAT
) -> list[PendingLine]:
    """The lines with no outcome (requests to `endpoint`), those sharing a prompt prefix together
    (the server's prefix cache then hits), in input order within a prefix."""
    query = (
        select(BatchLine.line_no, BatchLine.body, BatchLine.prefix_key, BatchLine.runs)
        .where(BatchLine.job_id == job_id, BatchLine.state == PENDING)
        .order_by(BatchLine.prefix_key, BatchLine.line_no)
    )
    return [
        PendingLine(row.line_no, row.body, row.prefix_key, row.runs, endpoint)
        for row in await session.execute(query)
    ]


_NO_ATTEMPT = {"attempt_request_id": None, "attempt_started_at": None, "attempt_deployment": None}


def _line(claim: Claim, line_no: int) -> Any:
    """A pending line of the job, while the claim holds the job."""
    held = select(BatchJob.id).where(_held_by(claim)).exists()
    return (
        (BatchLine.job_id == claim.job_id)
        & (BatchLine.line_no == line_no)
        & (BatchLine.state == PENDING)
        & held
    )


async def begin_attempts(
    session: AsyncSession, claim: Claim, runs: Sequence[tuple[PendingLine, str, str]], now: datetime
) -> list[bool]:
    """Write runs down before they are sent, each (line, request id, deployment id), in one
    transaction; for each, False (nothing written for it) when the claim no longer holds the job,
    the line has an outcome, or another run began since `line` was read."""
    begun = []
    for line, request_id, deployment in runs:
        statement = (
            update(BatchLine)
            .where(_line(claim, line.line_no), BatchLine.runs == line.runs)
            .values(
                runs=BatchLine.runs + 1,
                attempt_request_id=request_id,
                attempt_started_at=now,
                attempt_deployment=deployment,
            )
            .execution_options(synchronize_session=False)
        )
        begun.append(_rows(await session.execute(statement)) == 1)
    await session.commit()
    return begun


async def close_attempt(
    session: AsyncSession, claim: Claim, line_no: int, event: UsageEvent | None, *, broke: bool = False
) -> int | None:
    """End a run that stored no outcome (the deployment failed it, or the send broke): its usage
    record when it reached an upstream, the line left pending; `broke` counts it among the line's
    failures. The line's failures now, or None (nothing written) when the claim no longer holds
    the job."""
    statement = (
        update(BatchLine)
        .where(_line(claim, line_no))
        .values(_NO_ATTEMPT | {"failures": BatchLine.failures + (1 if broke else 0)})
        .returning(BatchLine.failures)
        .execution_options(synchronize_session=False)
    )
    failures = (await session.execute(statement)).scalar()
    if failures is None:
        await session.rollback()
        return None
    if event is not None:
        await _insert_records(session, [event])
    await session.commit()
    return int(failures)


async def orphaned_attempts(session: AsyncSession, job_id: str) -> list[Attempt]:
    """The runs written down on pending lines: once no run of this holder is in flight, each was
    sent by a process that died (or lost the job) before it stored anything."""
    query = (
        select(
            BatchLine.line_no,
            BatchLine.attempt_request_id,
            BatchLine.attempt_started_at,
            BatchLine.attempt_deployment,
            BatchLine.body,
        )
        .where(
            BatchLine.job_id == job_id,
            BatchLine.state == PENDING,
            BatchLine.attempt_request_id.is_not(None),
        )
        .order_by(BatchLine.line_no)
    )
    return [
        Attempt(row.line_no, row.attempt_request_id, row.attempt_started_at, row.attempt_deployment, row.body)
        for row in await session.execute(query)
    ]


async def record_orphans(
    session: AsyncSession, claim: Claim, orphans: Sequence[tuple[Attempt, UsageEvent]]
) -> bool:
    """Each orphaned run's (estimated) record and its attempt cleared, in one transaction: a run is
    recorded once however often this is retried (the record's key is the run's request id, and
    the attempt is cleared only while it names that run). False when the claim no longer holds
    the job (nothing written)."""
    held = select(BatchJob.id).where(_held_by(claim)).exists()
    if not await session.scalar(select(held)):
        return False
    cleared = []
    for attempt, event in orphans:
        statement = (
            update(BatchLine)
            .where(
                BatchLine.job_id == claim.job_id,
                BatchLine.line_no == attempt.line_no,
                BatchLine.attempt_request_id == attempt.request_id,
                held,
            )
            .values(_NO_ATTEMPT)
            .execution_options(synchronize_session=False)
        )
        if _rows(await session.execute(statement)) == 1:  # else cleared already, or the job lost
            cleared.append(event)
    await _insert_records(session, cleared)
    await session.commit()
    return True


async def record_outcome(
    session: AsyncSession, claim: Claim, outcome: LineOutcome, event: UsageEvent | None, now: datetime
) -> bool:
    """Store a line's outcome, its usage record and its counts in one transaction; False (nothing
    written) when the claim no longer holds the job or the line already has an outcome."""
    return await record_outcomes(session, claim, [(outcome, event)], now)


async def record_outcomes(
    session: AsyncSession,
    claim: Claim,
    finished: Sequence[tuple[LineOutcome, UsageEvent | None]],
    now: datetime,
) -> bool:
    """Store several lines' outcomes, their usage records and the job's counts in one transaction;
    False (nothing written) when the claim no longer holds the job or a line already has an
    outcome. One transaction for many lines: every outcome moves the job's own row, which
    serializes the transactions that write outcomes, so one each would cap a job at the rate
    PostgreSQL commits one after the other."""
    held = select(BatchJob.id).where(_held_by(claim)).exists()
    for outcome, _ in finished:
        stored = update(BatchLine).where(
            BatchLine.job_id == claim.job_id,
            BatchLine.line_no == outcome.line_no,
            BatchLine.state == PENDING,
            held,
        )
        values = {
            "state": outcome.state,
            "status_code": outcome.status_code,
            "response": outcome.response,
            "request_id": outcome.request_id,
            "attempts": outcome.attempts,
            "fencing_token": claim.fencing_token,
            "finished_at": now,
        } | _NO_ATTEMPT
        if (
            _rows(await session.execute(stored.values(values).execution_options(synchronize_session=False)))
            != 1
        ):
            await session.rollback()
            return False
    # Guarded again: the claim may have moved since the lines' statements; then nothing is kept.
    if _rows(await session.execute(_counted(claim, finished))) != 1:
        await session.rollback()
        return False
    await _insert_records(session, [event for _, event in finished if event is not None])
    await session.commit()
    return True


async def _insert_records(session: AsyncSession, events: Sequence[UsageEvent]) -> None:
    if events:
        dialect = session.get_bind().dialect.name
        await session.execute(_insert_ignoring_duplicates(dialect), [record_row(e) for e in events])


def _counted(claim: Claim, finished: Sequence[tuple[LineOutcome, UsageEvent | None]]) -> Any:
    succeeded = sum(1 for outcome, _ in finished if outcome.state == SUCCEEDED)
    events = [event for _, event in finished if event is not None]
    return (
        update(BatchJob)
        .where(_held_by(claim))
        .values(
            request_completed=BatchJob.request_completed + succeeded,
            request_failed=BatchJob.request_failed + (len(finished) - succeeded),
            prompt_tokens=BatchJob.prompt_tokens + sum(e.prompt_tokens for e in events),
            completion_tokens=BatchJob.completion_tokens + sum(e.completion_tokens for e in events),
            cached_tokens=BatchJob.cached_tokens + sum(e.cached_tokens for e in events),
            paused_reason=None,  # a line finished: the pinned deployment answers again
        )
        .execution_options(synchronize_session=False)
    )


def _insert_ignoring_duplicates(dialect_name: str) -> Insert:
    """One record per line, however often it ran: the line's outcome is stored only while it is
    pending, in the same transaction. No conflict target: on PostgreSQL the key is (request_id,
    created_at) of the partitioned table (migration 0008), on SQLite request_id alone."""
    if dialect_name == "postgresql":
        return postgresql.insert(_RECORDS).on_conflict_do_nothing()
    if dialect_name == "sqlite":
        return sqlite.insert(_RECORDS).on_conflict_do_nothing()
    raise RuntimeError(f"usage records cannot be written to a {dialect_name} database")


async def line_records(session: AsyncSession, job_id: str) -> list[LineRecord]:
    """Every line of the job with its outcome so far, in input order."""
    query = (
        select(
            BatchLine.line_no,
            BatchLine.custom_id,
            BatchLine.state,
            BatchLine.status_code,
            BatchLine.response,
            BatchLine.request_id,
        )
        .where(BatchLine.job_id == job_id)
        .order_by(BatchLine.line_no)
    )
    return [
        LineRecord(row.line_no, row.custom_id, row.state, row.status_code, row.response, row.request_id)
        for row in await session.execute(query)
    ]


async def finish_job(
    session: AsyncSession,
    claim: Claim,
    status: str,
    files: JobFiles,
    now: datetime,
    *,
    store: FileStore | None = None,
    errors: Sequence[Mapping[str, object]] | None = None,
) -> bool:
    """Store the job's files (their bytes in `store`, when files are kept there) and give it its
    final status (with `errors`, the Batch object's, for a job that failed while it ran), in one
    transaction; False (nothing stored) when the claim no longer holds the job. A store that fails
    raises, and the job keeps the status it had."""
    values: dict[str, object] = {
        "status": status,
        f"{status}_at": now,
        "paused_reason": None,
        "lease_expires_at": None,
    }
    if errors is not None:
        values["errors"] = [dict(error) for error in errors]
    final = (
        update(BatchJob).where(_held_by(claim)).values(values).execution_options(synchronize_session=False)
    )
    # This statement locks the job's row: no claim can take it before the commit.
    if _rows(await session.execute(final)) != 1:
        await session.rollback()
        return False
    job_id, team_id = claim.job_id, claim.team_id
    output_name, errors_name = f"{job_id}_output.jsonl", f"{job_id}_error.jsonl"
    output = await store_file(session, team_id, BATCH_OUTPUT, output_name, files.output, store=store)
    error_file = None
    if files.errors:
        error_file = await store_file(session, team_id, BATCH_ERRORS, errors_name, files.errors, store=store)
    named = (
        update(BatchJob)
        .where(_held_by(claim))
        .values(output_file_id=output.id, error_file_id=None if error_file is None else error_file.id)
        .execution_options(synchronize_session=False)
    )
    await session.execute(named)
    await session.commit()
    return True
