"""The batch job runner: claims jobs, feeds their lines through the scheduler to the job's pinned
deployment, and stores each line's outcome in the ledger (`gateway.jobs.ledger`).

`JobRunner(services).run()` claims one job every `jobs.poll_interval_s` and runs each claimed job
in a task of its own (`JobRun`), renewing its lease every third of `jobs.lease_s` and reading its
status every `STATUS_CHECK_S`, so that a cancel stops new lines at once. A job's id is its batch
id: its lines go to one deployment, at batch priority, and wait there while it fails (the job
pauses; no line fails for it). A process killed mid-job stops renewing; another claims the job
once the lease runs out and re-runs only the lines whose outcomes were never stored. Sending one
line is `gateway.jobs.line_sender`'s; a job whose deployment runs batches itself (`batch_execution:
provider`) goes to the provider's own batch API instead (`gateway.jobs.provider_batches`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob
from gateway.db.teams import as_utc, utcnow
from gateway.jobs import ledger
from gateway.jobs.ledger import Claim, PendingLine
from gateway.jobs.line_sender import LineRun, LineSender, LineUsage
from gateway.jobs.outcomes import OutcomeGroups
from gateway.jobs.output_files import BATCH_CANCELLED, BATCH_EXPIRED, build_job_files
from gateway.jobs.provider_batches import ProviderBatches
from gateway.limits import Reservations
from gateway.proxy.service import ProxyService
from gateway.routing.directives import Directives, Priority

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from gateway.dispatch.executor import Executor
    from gateway.jobs.file_store import FileStore
    from gateway.metrics import Metrics
    from gateway.routing.deployment import DeploymentTable
    from gateway.routing.health import HealthBoard
    from gateway.routing.pins import PinStore
    from gateway.settings import JobSettings, Settings

log = structlog.get_logger("gateway.jobs")
# What a job's final status is, by what ended it, and what its unfinished lines are called.
NEVER_RUN = {"completed": None, "cancelled": BATCH_CANCELLED, "expired": BATCH_EXPIRED}
# How often a running job's status is read, so that a cancel stops new lines within this; the
# lease renewal alone would see a cancel only every third of a lease.
STATUS_CHECK_S = 0.5


class RunnerServices(Protocol):
    """What the runner takes from the process's services (`gateway.services.Services`)."""

    settings: Settings
    table: DeploymentTable
    sessions: async_sessionmaker[AsyncSession]
    pins: PinStore
    health: HealthBoard
    executor: Executor
    metrics: Metrics
    file_store: FileStore | None


class LeaseLost(Exception):
    """Another process holds the job now: this one must stop without writing anything more."""


def process_owner() -> str:
    """The lease owner this process writes: host, pid and a random part (a pid is reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class SendsLines(Protocol):
    """What a job run sends its lines with (`LineSender`)."""

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives
    ) -> LineRun: ...


def job_directives(job: BatchJob) -> Directives:
    """The job's batch id and the region/provider its create request asked for."""
    given = job.directives or {}
    providers = tuple(name.strip() for name in given.get("provider", "").split(",") if name.strip())
    return Directives(batch=job.id, region=given.get("region"), providers=providers, priority=Priority.BATCH)


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
    ) -> None:
        self.claim = claim
        self._provider = provider
        self._file_store = file_store  # where the output files' bytes go; None: the database
        self._sessions = sessions
        self._settings = settings
        self._sender = sender
        self._cancelled = asyncio.Event()  # the API asked to cancel (seen by `_watch_status`)
        self._paused: str | None = None  # why the lines stopped going out, while they wait
        self._finishing = False  # the final transaction has begun
        self._outcomes = OutcomeGroups(sessions, claim, utcnow)

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
                self._cancelled.set()

    async def _watch_status(self) -> None:
        """Read the job's status often, apart from the renewal, until it reads cancelling."""
        while not self._cancelled.is_set():
            await asyncio.sleep(STATUS_CHECK_S)
            try:
                async with self._sessions() as session:
                    status = await ledger.job_status(session, self.claim)
            except Exception as exc:  # the database is away: read again at the next check
                log.debug("batch_status_check_failed", batch=self.claim.job_id, error=type(exc).__name__)
                continue
            if status == "cancelling":
                self._cancelled.set()

    async def _drive(self) -> None:
        async with self._sessions() as session:
            job = await ledger.load_job(session, self.claim.job_id)
            principal = await ledger.job_principal(session, job.key_id)
        status = job.status
        if status == "validating":
            status = await self._move("in_progress", expect=("validating",))
        end = "completed"
        if status == "cancelling":
            self._cancelled.set()
        if status in ("in_progress", "cancelling"):
            end = await self._run_job(job, principal)
        if end == "completed" and status != "finalizing":
            moved = await self._move("finalizing", expect=("in_progress",))
            end = "cancelled" if moved == "cancelling" else end
        await self._finish(end)

    async def _move(self, status: str, *, expect: tuple[str, ...]) -> str:
        """The job's status after trying to move it from `expect` to `status`."""
        async with self._sessions() as session:
            if await ledger.move_job(session, self.claim, status, utcnow(), expect=expect):
                return status
            job = await ledger.load_job(session, self.claim.job_id)
        if job.fencing_token != self.claim.fencing_token:
            raise LeaseLost(self.claim.job_id)
        return job.status  # the API moved it first (a cancel)

    async def _run_job(self, job: BatchJob, principal: Principal) -> str:
        """On the provider's own batch API when the job's deployment runs it there, else line by
        line; what ended it."""
        if self._provider is None:
            return await self._run_lines(job, principal)
        placed = await self._provider.placement(job, principal, job_directives(job))
        if placed is None:
            return await self._run_lines(job, principal)
        end = await self._provider.run(self.claim, job, principal, placed, self._cancelled)
        if end is None:
            raise LeaseLost(self.claim.job_id)
        return end

    async def _run_lines(self, job: BatchJob, principal: Principal) -> str:
        """Send the pending lines until none is left; what ended it (completed, cancelled, expired)."""
        directives, expires_at = job_directives(job), as_utc(job.expires_at)
        while True:
            if self._cancelled.is_set():
                return "cancelled"
            if utcnow() >= expires_at:
                return "expired"
            async with self._sessions() as session:
                lines = await ledger.pending_lines(session, job.id)
            if not lines:
                return "completed"
            paused = await self._send_all(lines, principal, directives, expires_at)
            if paused is not None:
                await self._pause(paused)

    async def _send_all(
        self, lines: list[PendingLine], principal: Principal, directives: Directives, expires_at: datetime
    ) -> str | None:
        """Up to `concurrency` lines in flight; none started after a cancel, the expiry or a pause,
        while those in flight finish and are stored. Why the lines paused, or None."""
        self._paused = None
        slots = asyncio.Semaphore(self._settings.concurrency)
        async with asyncio.TaskGroup() as group:
            for line in lines:
                await slots.acquire()
                if self._cancelled.is_set() or self._paused is not None or utcnow() >= expires_at:
                    slots.release()
                    break
                group.create_task(self._send(line, principal, directives, slots))
        return self._paused

    async def _send(
        self, line: PendingLine, principal: Principal, directives: Directives, slots: asyncio.Semaphore
    ) -> None:
        try:
            sent = await self._sender.send(self.claim.job_id, line, principal, directives)
            if sent.outcome is None:
                self._paused = self._paused or sent.paused
                return
            stored = await self._outcomes.store(sent.outcome, sent.event)
            if not stored:
                raise LeaseLost(self.claim.job_id)
        finally:
            slots.release()

    async def _pause(self, reason: str) -> None:
        """The pinned deployment keeps failing: say so on the job, wait, then try it again."""
        async with self._sessions() as session:
            if not await ledger.set_paused(session, self.claim, reason):
                raise LeaseLost(self.claim.job_id)
        log.warning("batch_paused", batch=self.claim.job_id, reason=reason, pause_s=self._settings.pause_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.pause_s):
                await self._cancelled.wait()

    async def _finish(self, end: str) -> None:
        async with self._sessions() as session:
            lines = await ledger.line_records(session, self.claim.job_id)
        files = build_job_files(self.claim.job_id, lines, NEVER_RUN[end])
        self._finishing = True
        async with self._sessions() as session:
            # A store that fails raises here: the job keeps its status and is claimed again.
            if not await ledger.finish_job(session, self.claim, end, files, utcnow(), store=self._file_store):
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
        )
        reservations = Reservations(services.table, catalog.limits.default_max_tokens)
        self.owner = owner or process_owner()
        self._sender = LineSender(proxy, usage, reservations, catalog.limits.max_messages)
        self._provider = ProviderBatches(
            catalog, services.table, services.pins, services.health, services.sessions
        )
        self._settings = catalog.jobs
        self._sessions = services.sessions
        self._file_store = services.file_store
        self._runs: dict[str, tuple[JobRun, asyncio.Task[None]]] = {}
        self._stopping = asyncio.Event()

    @property
    def holding(self) -> list[str]:
        """The ids of the jobs this runner is running now."""
        return list(self._runs)

    async def run(self) -> None:
        """Claim a job every poll interval until `stop`; cancelled, the jobs' tasks end with it and
        their leases run out, as if the process had died."""
        try:
            while not self._stopping.is_set():
                try:
                    await self.claim_next()
                except Exception as exc:  # the database is away: look again at the next poll
                    log.warning("batch_claim_failed", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.poll_interval_s):
                        await self._stopping.wait()
        finally:
            await self._cancel_runs()

    async def claim_next(self) -> Claim | None:
        """Claim one job and start running it; None when no job is free."""
        async with self._sessions() as session:
            claim = await ledger.claim_job(session, self.owner, self._settings.lease_s, utcnow(), self._runs)
        if claim is None:
            return None
        job_run = JobRun(
            claim, self._sessions, self._settings, self._sender, self._provider, file_store=self._file_store
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
