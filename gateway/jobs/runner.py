"""The batch job runner: claims jobs, feeds their lines through the scheduler to the job's pinned
deployment, and stores each line's outcome in the ledger (`gateway.jobs.ledger`).

`JobRunner(services).run()` claims one job every `jobs.poll_interval_s` and runs each claimed job
in a task of its own (`JobRun`), renewing its lease every third of `jobs.lease_s` and reading its
status every `STATUS_CHECK_S`, so that a cancel stops new lines at once. A job's id is its batch
id: its lines go to one deployment, at batch priority, and wait there while it fails (the job
pauses; no line fails for it). Its lines are admitted by its key's limits like any request: a
spent budget fails a line, a full rate window paces the job (`Pacing`), and a revoked or expired
key or a deleted team, read with the status, stops it. A process killed mid-job stops renewing;
another claims the job once the lease runs out, records once each run the dead process had
written down and not ended (an estimate: `ledger.orphaned_attempts`), and re-runs only the lines
whose outcomes were never stored. A line whose send breaks is caught alone and fails after
`MAX_LINE_FAILURES`. Sending one line is `gateway.jobs.line_sender`'s; a job whose deployment runs
batches itself (`batch_execution: provider`) goes to the provider's own batch API instead
(`gateway.jobs.provider_batches`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import socket
import time
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob
from gateway.db.teams import as_utc, utcnow
from gateway.jobs import ledger
from gateway.jobs.grouped_writes import outcome_groups, run_begins
from gateway.jobs.ledger import Claim, LeaseLost, PendingLine
from gateway.jobs.line_sender import (
    BeginRun,
    LineRun,
    LineSender,
    LineUsage,
    broken_outcome,
    orphan_event,
)
from gateway.jobs.output_files import BATCH_CANCELLED, BATCH_EXPIRED, build_job_files
from gateway.jobs.placement import with_tier
from gateway.jobs.provider_batches import OVER_BUDGET, ProviderBatches
from gateway.jobs.repository import CHAT_ENDPOINT, LINE_ENDPOINTS
from gateway.limits import Limiter, Reservations
from gateway.proxy.service import ProxyService
from gateway.routing.directives import Directives, Priority
from gateway.settings import LimitSettings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from gateway.dispatch.executor import Executor
    from gateway.jobs.files.store import FileStore
    from gateway.metrics.instruments import Metrics
    from gateway.routing.deployment import Deployment, DeploymentTable
    from gateway.routing.health import HealthBoard
    from gateway.routing.pins import PinStore
    from gateway.settings import JobSettings, Settings
    from gateway.telemetry import Telemetry

log = structlog.get_logger("gateway.jobs")
# What a job's final status is, by what ended it, and what its unfinished lines are called.
NEVER_RUN = {"completed": None, "cancelled": BATCH_CANCELLED, "expired": BATCH_EXPIRED}
# How often a running job's status is read, so that a cancel stops new lines within this; the
# lease renewal alone would see a cancel only every third of a lease.
STATUS_CHECK_S = 0.5
# A line whose send breaks (an error the gateway did not expect, or an outcome it cannot store) this
# many times fails alone, with its error in the error file, so that no line can hold a job for ever.
MAX_LINE_FAILURES = 3
DEFAULT_MAX_MESSAGES = LimitSettings().max_messages
# The Batch object's error for a job its key stopped (ledger.Standing.stopped)
STOPPED_MESSAGES = {
    ledger.KEY_REVOKED: "The API key that created this batch was revoked; its unfinished requests never ran.",
    ledger.KEY_EXPIRED: "The API key that created this batch expired; its unfinished requests never ran.",
    ledger.TEAM_DELETED: "The team of this batch was deleted; its unfinished requests never ran.",
    ledger.KEY_GONE: "The API key that created this batch no longer exists; its unfinished requests never ran.",
    # a provider-run job whose next provider batch would cost more than the budgets have left
    OVER_BUDGET: "The estimated cost of this batch's unfinished requests does not fit what is left of "
    "its key's or team's monthly budget; they were not submitted.",
}


class RunnerServices(Protocol):
    """What the runner takes from the process's services (`gateway.services.Services`)."""

    settings: Settings
    table: DeploymentTable
    sessions: async_sessionmaker[AsyncSession]
    pins: PinStore
    health: HealthBoard
    executor: Executor
    telemetry: Telemetry | None
    metrics: Metrics
    limiter: Limiter
    file_store: FileStore | None


def process_owner() -> str:
    """The lease owner this process writes: host, pid and a random part (a pid is reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class SendsLines(Protocol):
    """What a job run sends its lines with (`LineSender`)."""

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives, begin: BeginRun
    ) -> LineRun: ...

    async def settle(self, principal: Principal, run: LineRun) -> None: ...

    async def release(self, principal: Principal, run: LineRun) -> None: ...


def job_directives(job: BatchJob) -> Directives:
    """The job's batch id and the region/provider its create request asked for."""
    given = job.directives or {}
    providers = tuple(name.strip() for name in given.get("provider", "").split(",") if name.strip())
    return Directives(batch=job.id, region=given.get("region"), providers=providers, priority=Priority.BATCH)


class Pacing:
    """When the job's lines may next ask the key's rate windows: a refused line sets it, and every
    line waits for it (no line is failed for a full window), instead of each asking in a loop."""

    def __init__(self) -> None:
        self._until = 0.0  # the loop's clock

    def defer(self, seconds: float) -> None:
        now = asyncio.get_running_loop().time()
        self._until = max(self._until, now + seconds)

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the window opens, or `stop` is set."""
        loop = asyncio.get_running_loop()
        while (left := self._until - loop.time()) > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await stop.wait()


class JobRun:
    """One claimed job, from its claim to its final status, or to the loss of its lease."""

    def __init__(
        self,
        claim: Claim,
        sessions: async_sessionmaker[AsyncSession],
        settings: JobSettings,
        sender: SendsLines,
        provider: ProviderBatches | None = None,
        *,
        file_store: FileStore | None = None,
        table: DeploymentTable | None = None,
        max_messages: int = DEFAULT_MAX_MESSAGES,
    ) -> None:
        self.claim = claim
        self._provider = provider
        self._file_store = file_store  # where the output files' bytes go; None: the database
        self._sessions = sessions
        self._settings = settings
        self._sender = sender
        self._table = table  # the deployments a recovered run is priced at
        self._max_messages = max_messages
        self._stop = asyncio.Event()  # no new line: a cancel, or the key may no longer send
        self._cancel_asked = False  # the API asked to cancel (seen by `_watch_status`)
        self._stopped: str | None = None  # why the key may no longer send (ledger.Standing)
        self._key_id: str | None = None
        self._principal: Principal | None = None  # the key's limits, read afresh as the job runs
        self._paused: str | None = None  # why the lines stopped going out, while they wait
        self._pacing = Pacing()
        self._finishing = False  # the final transaction has begun
        self._outcomes = outcome_groups(sessions, claim, utcnow)
        self._begins = run_begins(sessions, claim, utcnow)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                renewal = group.create_task(self._renew())
                watch = group.create_task(self._watch_status())
                await self._drive()
                renewal.cancel()
                watch.cancel()
        except* LeaseLost:
            log.warning("batch_lease_lost", batch=self.claim.job_id, fencing_token=self.claim.fencing_token)

    def _cancel(self) -> None:
        self._cancel_asked = True
        self._stop.set()

    def _ended(self) -> str:
        """What a stop ends the job as: cancelled when asked, failed when the key stopped it."""
        return "failed" if self._stopped is not None and not self._cancel_asked else "cancelled"

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._settings.lease_s / 3)
            try:
                async with self._sessions() as session:
                    status = await ledger.renew_lease(session, self.claim, self._settings.lease_s, utcnow())
            except Exception as exc:  # the database is away: try again; if the lease runs out
                # meanwhile and another process claims the job, every later write here is refused
                log.warning("batch_lease_renewal_failed", batch=self.claim.job_id, error=type(exc).__name__)
                continue
            if status is None and self._finishing:
                return  # the job is final, or the final write finds the lease lost itself
            if status is None:
                raise LeaseLost(self.claim.job_id)
            if status == "cancelling":
                self._cancel()

    async def _watch_status(self) -> None:
        """Read the job's status and its key's standing often, apart from the renewal, until it
        stops: a cancel, a revoked or expired key or a deleted team stop new lines within this."""
        while not self._stop.is_set():
            await asyncio.sleep(STATUS_CHECK_S)
            try:
                async with self._sessions() as session:
                    status = await ledger.job_status(session, self.claim)
                    standing = None
                    if self._key_id is not None:
                        standing = await ledger.key_standing(session, self._key_id, time.time())
            except Exception as exc:  # the database is away: read again at the next check
                log.debug("batch_status_check_failed", batch=self.claim.job_id, error=type(exc).__name__)
                continue
            if status == "cancelling":
                self._cancel()
            if standing is not None:
                self._stand(standing)

    def _stand(self, standing: ledger.Standing) -> None:
        """The key as it stands now: its limits for the next lines, or a stop."""
        if standing.principal is not None:
            self._principal = standing.principal
        if standing.stopped is not None and self._stopped is None:
            self._stopped = standing.stopped
            log.warning("batch_key_stopped", batch=self.claim.job_id, reason=standing.stopped)
            self._stop.set()

    async def _drive(self) -> None:
        async with self._sessions() as session:
            job = await ledger.load_job(session, self.claim.job_id)
            standing = await ledger.key_standing(session, job.key_id, time.time())
        self._key_id = job.key_id
        self._stand(standing)
        await self._record_orphans(job)  # runs a dead process left in flight: each gets its record
        status = job.status
        if status == "validating":
            status = await self._move("in_progress", expect=("validating",))
        end = "completed"
        if status == "cancelling":
            self._cancel()
        if status in ("in_progress", "cancelling"):
            end = await self._run_job(job)
        if end == "completed" and status != "finalizing":
            moved = await self._move("finalizing", expect=("in_progress",))
            end = "cancelled" if moved == "cancelling" else end
        await self._finish(end, job)

    async def _move(self, status: str, *, expect: tuple[str, ...]) -> str:
        """The job's status after trying to move it from `expect` to `status`."""
        async with self._sessions() as session:
            if await ledger.move_job(session, self.claim, status, utcnow(), expect=expect):
                return status
            job = await ledger.load_job(session, self.claim.job_id)
        if job.fencing_token != self.claim.fencing_token:
            raise LeaseLost(self.claim.job_id)
        return job.status  # the API moved it first (a cancel)

    async def _run_job(self, job: BatchJob) -> str:
        """On the provider's own batch API when the job's deployment runs it there, else line by
        line; what ended it."""
        if self._stop.is_set() or self._principal is None:
            return self._ended()
        if self._provider is None or job.endpoint != CHAT_ENDPOINT:  # providers run chat batches only
            return await self._run_lines(job)
        placed = await self._provider.placement(job, self._principal, job_directives(job))
        if placed is None:
            return await self._run_lines(job)
        principal = self._principal
        end = await self._provider.run(
            self.claim, job, principal, placed, self._stop, limits=lambda: self._principal or principal
        )
        if end is None:
            raise LeaseLost(self.claim.job_id)
        if end == OVER_BUDGET:  # the job fails as one its key stopped does, with what it finished
            self._stopped = self._stopped or OVER_BUDGET
            return "failed"
        return self._ended() if end == "cancelled" else end

    async def _run_lines(self, job: BatchJob) -> str:
        """Send the pending lines until none is left; what ended it (completed, cancelled, expired,
        failed: the key stopped it)."""
        directives, expires_at = job_directives(job), as_utc(job.expires_at)
        while True:
            if self._stop.is_set():
                return self._ended()
            if utcnow() >= expires_at:
                return "expired"
            async with self._sessions() as session:
                lines = await ledger.pending_lines(session, job.id, LINE_ENDPOINTS[job.endpoint])
            lines = with_tier(lines, job)  # a job placed on a service tier's lane asks it of each line
            if not lines:
                return "completed"
            paused = await self._send_all(lines, directives, expires_at)
            if paused is not None:
                await self._pause(paused)

    def _halted(self, expires_at: datetime) -> bool:
        """No new line may start: stopped, paused, or past the window."""
        return self._stop.is_set() or self._paused is not None or utcnow() >= expires_at

    async def _send_all(
        self, lines: list[PendingLine], directives: Directives, expires_at: datetime
    ) -> str | None:
        """Up to `concurrency` lines in flight; none started after a stop, the expiry or a pause,
        while those in flight finish and are stored. Why the lines paused, or None."""
        self._paused = None
        slots = asyncio.Semaphore(self._settings.concurrency)
        async with asyncio.TaskGroup() as group:
            for line in lines:
                await slots.acquire()
                if self._halted(expires_at):
                    slots.release()
                    break
                group.create_task(self._send(line, directives, expires_at, slots))
                # One line started per turn of the event loop: started all at once, each turn runs
                # every line's next step (parse, limits, route), so the first line reaches its
                # permit only after the last one's preparation and the server idles meanwhile
                await asyncio.sleep(0)
        return self._paused

    async def _send(
        self, line: PendingLine, directives: Directives, expires_at: datetime, slots: asyncio.Semaphore
    ) -> None:
        try:
            sent = await self._paced(line, directives, expires_at)
            if sent is None:
                return  # stopped while it waited for the rate window: still pending
            try:
                await self._store(line, sent)
            except LeaseLost:
                raise
            except Exception as exc:  # its outcome could not be stored: a failure of the line
                log.warning(
                    "batch_line_unstored",
                    batch=self.claim.job_id,
                    line=line.line_no,
                    error=type(exc).__name__,
                )
                await self._broke(line, dataclasses.replace(sent, outcome=None, broke=type(exc).__name__))
        finally:
            slots.release()

    async def _paced(self, line: PendingLine, directives: Directives, expires_at: datetime) -> LineRun | None:
        """The line sent once its key's rate windows let it in; None if the job halted meanwhile."""
        while True:
            await self._pacing.wait(self._stop)
            if self._halted(expires_at):
                return None
            assert self._principal is not None
            sent = await self._sender.send(self.claim.job_id, line, self._principal, directives, self._begin)
            if sent.pace_s is None:
                return sent
            self._pacing.defer(sent.pace_s)

    async def _begin(self, line: PendingLine, request_id: str, deployment: Deployment) -> None:
        """Write a line's run down before it is sent (`gateway.dispatch.executor.Attempts.before_send`)."""
        if not await self._begins.write((line, request_id, deployment.id)):
            raise LeaseLost(self.claim.job_id)

    async def _store(self, line: PendingLine, sent: LineRun) -> None:
        """What came of a send, stored: its outcome, or a broken send counted, or the run's record
        alone while the job pauses; then the limiter settled."""
        assert self._principal is not None
        if sent.broke is not None:
            await self._broke(line, sent)
            return
        if sent.outcome is not None:
            stored = await self._outcomes.write((sent.outcome, sent.event))
        else:  # the deployment failed it: the line stays pending, its run has its record
            self._paused = self._paused or sent.paused
            async with self._sessions() as session:
                stored = await ledger.close_attempt(session, self.claim, line.line_no, sent.event) is not None
        if not stored:
            with contextlib.suppress(Exception):  # the hold expires on its own
                await self._sender.release(self._principal, sent)
            raise LeaseLost(self.claim.job_id)
        await self._settle(sent)

    async def _broke(self, line: PendingLine, sent: LineRun) -> None:
        """A send that broke: its run's record (when it may have reached an upstream) and one more
        failure for the line; at MAX_LINE_FAILURES the line fails alone and the job goes on."""
        assert self._principal is not None and sent.broke is not None
        async with self._sessions() as session:
            failures = await ledger.close_attempt(session, self.claim, line.line_no, sent.event, broke=True)
        if failures is None:
            with contextlib.suppress(Exception):  # the hold expires on its own
                await self._sender.release(self._principal, sent)
            raise LeaseLost(self.claim.job_id)
        await self._settle(sent)
        log.warning(
            "batch_line_broke",
            batch=self.claim.job_id,
            line=line.line_no,
            error=sent.broke,
            failures=failures,
        )
        if failures >= MAX_LINE_FAILURES:
            request_id = sent.request_id or ledger.line_request_id(
                self.claim.job_id, line.line_no, line.runs + 1
            )
            outcome = broken_outcome(line.line_no, request_id, sent.broke, failures)
            if not await self._outcomes.write((outcome, None)):
                raise LeaseLost(self.claim.job_id)

    async def _settle(self, run: LineRun) -> None:
        """The limiter settled for a stored run. Its spend counters are rebuilt from the records
        when they are lost, so a limiter that fails here fails nothing else."""
        if self._principal is None:
            return
        try:
            await self._sender.settle(self._principal, run)
        except Exception as exc:
            log.warning("batch_line_settle_failed", batch=self.claim.job_id, error=type(exc).__name__)

    async def _record_orphans(self, job: BatchJob) -> None:
        """Each run written down and never ended (its process died, or lost the job, with it in
        flight) gets its one record, estimated; the line stays pending and runs again."""
        async with self._sessions() as session:
            orphans = await ledger.orphaned_attempts(session, job.id)
        if not orphans:
            return
        deployments: tuple[Deployment, ...] = ()
        if self._table is not None:  # the job's model's first, then any other that has the run's id
            deployments = self._table.by_model.get(job.model or "", ()) + tuple(self._table.all())
        recorded = []
        for attempt in orphans:
            event = orphan_event(
                attempt,
                (job.team_id, job.key_id),
                job.id,
                deployments,
                self._max_messages,
                endpoint=LINE_ENDPOINTS[job.endpoint],
            )
            if event is None:  # the catalog no longer has the model: nothing to price it at
                log.warning("batch_run_unpriced", batch=job.id, request_id=attempt.request_id)
                continue
            recorded.append((attempt, event))
        async with self._sessions() as session:
            if not await ledger.record_orphans(session, self.claim, recorded):
                raise LeaseLost(self.claim.job_id)
        log.warning("batch_runs_recovered", batch=job.id, runs=len(recorded))
        for _, event in recorded:
            await self._settle(LineRun(None, event))

    async def _pause(self, reason: str) -> None:
        """The pinned deployment keeps failing: say so on the job, wait, then try it again."""
        async with self._sessions() as session:
            if not await ledger.set_paused(session, self.claim, reason):
                raise LeaseLost(self.claim.job_id)
        log.warning("batch_paused", batch=self.claim.job_id, reason=reason, pause_s=self._settings.pause_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.pause_s):
                await self._stop.wait()

    async def _finish(self, end: str, job: BatchJob) -> None:
        await self._record_orphans(job)  # this holder's own runs that ended without being closed
        async with self._sessions() as session:
            lines = await ledger.line_records(session, self.claim.job_id)
        never_run = self._stopped if end == "failed" else NEVER_RUN[end]
        files = build_job_files(self.claim.job_id, lines, never_run)
        errors = None
        if end == "failed" and self._stopped is not None:
            errors = [
                {
                    "code": self._stopped,
                    "message": STOPPED_MESSAGES[self._stopped],
                    "param": None,
                    "line": None,
                }
            ]
        self._finishing = True
        async with self._sessions() as session:
            # A store that fails raises here: the job keeps its status and is claimed again.
            finished = await ledger.finish_job(
                session, self.claim, end, files, utcnow(), store=self._file_store, errors=errors
            )
            if not finished:
                raise LeaseLost(self.claim.job_id)
        log.info("batch_finished", batch=self.claim.job_id, status=end, lines=len(lines))


class JobRunner:
    """Claims jobs for this process and runs each in a task of its own, until `stop`."""

    def __init__(self, services: RunnerServices, *, owner: str | None = None) -> None:
        catalog = services.settings.catalog
        usage = LineUsage()
        proxy = ProxyService(
            services.table,
            services.pins,
            services.health,
            services.executor,
            usage,
            catalog.retry,
            on_event=services.metrics.observe_event,
            telemetry=services.telemetry,
            scheduling=catalog.scheduling,
        )
        reservations = Reservations(services.table, catalog.limits.default_max_tokens)
        self.owner = owner or process_owner()
        self._sender = LineSender(proxy, usage, reservations, services.limiter, catalog.limits.max_messages)
        self._table = services.table
        self._max_messages = catalog.limits.max_messages
        self._provider = ProviderBatches(
            catalog, services.table, services.pins, services.health, services.sessions, services.limiter
        )
        self._settings = catalog.jobs
        self._sessions = services.sessions
        self._file_store = services.file_store
        self._runs: dict[str, tuple[JobRun, asyncio.Task[None]]] = {}
        self._stopping = asyncio.Event()
        self._woken = asyncio.Event()  # a job was created here: look now, not at the next poll

    @property
    def holding(self) -> list[str]:
        """The ids of the jobs this runner is running now."""
        return list(self._runs)

    async def run(self) -> None:
        """Claim a job every poll interval, or at once when `wake` says one was created here, until
        `stop`; cancelled, the jobs' tasks end with it and their leases run out, as if the process
        had died."""
        try:
            while not self._stopping.is_set():
                self._woken.clear()
                try:
                    await self.claim_next()
                except Exception as exc:  # the database is away: look again at the next poll
                    log.warning("batch_claim_failed", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.poll_interval_s):
                        await self._woken.wait()
        finally:
            await self._cancel_runs()

    def wake(self) -> None:
        """A job was just created in this process: claim it now rather than at the next poll (the
        poll's wait would be idle time for every slot of the job's deployment). Other processes
        find it at their poll, as before."""
        self._woken.set()

    async def claim_next(self) -> Claim | None:
        """Claim one job and start running it; None when no job is free."""
        async with self._sessions() as session:
            claim = await ledger.claim_job(session, self.owner, self._settings.lease_s, utcnow(), self._runs)
        if claim is None:
            return None
        job_run = JobRun(
            claim,
            self._sessions,
            self._settings,
            self._sender,
            self._provider,
            file_store=self._file_store,
            table=self._table,
            max_messages=self._max_messages,
        )
        task = asyncio.create_task(self._run_job(job_run), name=f"batch-job-{claim.job_id}")
        self._runs[claim.job_id] = (job_run, task)
        task.add_done_callback(lambda _: self._runs.pop(claim.job_id, None))
        log.info("batch_claimed", batch=claim.job_id, status=claim.status, fencing_token=claim.fencing_token)
        return claim

    @staticmethod
    async def _run_job(job_run: JobRun) -> None:
        try:
            await job_run.run()
        except Exception as exc:  # the lease runs out and the job is claimed again, a lease later
            log.error("batch_run_failed", batch=job_run.claim.job_id, error=type(exc).__name__)

    async def stop(self) -> None:
        """Stop claiming and running; give the leases up, so another process resumes at once
        (the lines in flight run again there)."""
        self._stopping.set()
        self._woken.set()
        claims = [job_run.claim for job_run, _ in self._runs.values()]
        await self._cancel_runs()
        await self._provider.aclose()
        for claim in claims:
            try:
                async with self._sessions() as session:
                    await ledger.release_lease(session, claim)
            except Exception as exc:  # the lease then runs out on its own
                log.warning("batch_lease_release_failed", batch=claim.job_id, error=type(exc).__name__)

    async def _cancel_runs(self) -> None:
        tasks = [task for _, task in self._runs.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
