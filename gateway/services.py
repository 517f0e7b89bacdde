"""The running gateway's collaborators, built once in the app lifespan and handed to handlers.

`Services` is created by `open_services(settings)` and closed by `Services.aclose()`; handlers
declare it as the app's `services` dependency (`ServicesDependency`, provided by
`provide_services`). Nothing here is a module-level global.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.params import SkipValidation
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.attempts import KeyAttempts
from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.session import (
    ReplicaSessions,
    SessionSource,
    create_engine,
    open_read_engine,
    session_factory,
)
from gateway.dispatch.executor import Executor
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.dispatch.httpx_bridge import HttpxUpstream
from gateway.dispatch.upstream import UpstreamClient
from gateway.idempotency import IdempotentRequests, open_idempotency
from gateway.jobs.files.slots import FileSlots
from gateway.jobs.files.store import FileStore, open_file_store
from gateway.jobs.runner import JobRunner
from gateway.limits import Limiter, MemoryLimiter, RecordedSpend, RedisLimiter, Reservations, reconcile
from gateway.metering.storage.buffer import MemoryBuffer, UsageBuffer
from gateway.metering.storage.redis_buffer import RedisStreamBuffer, process_consumer_name
from gateway.metering.storage.writer import UsageWriter
from gateway.metrics.instruments import Metrics
from gateway.proxy.exchange import ProxyPipeline
from gateway.proxy.relay import KeyStreams
from gateway.proxy.service import ProxyService
from gateway.reconciliation.daily import reconcile_daily
from gateway.reconciliation.reports import reconcilable
from gateway.redis.client import RedisClient, durability_of, redis_client
from gateway.redis.group_commit import PipelineBatcher
from gateway.responses_store.continuation import StoredResponses
from gateway.responses_store.owners import ResponseOwners
from gateway.responses_store.store import ResponseStore
from gateway.routing.deployment import DeploymentTable
from gateway.routing.health import HealthBoard, RedisHealthBoard
from gateway.routing.pins import MemoryPinStore, PinStore, RedisPinStore
from gateway.scheduling.permits import PermitBank
from gateway.scheduling.redis.permits import RedisPermits
from gateway.scheduling.scheduler import Scheduler
from gateway.settings import Catalog, ProviderKind, Settings
from gateway.telemetry import Telemetry, open_telemetry
from mock_upstream.behaviour import MockBehaviour
from mock_upstream.transport import InProcessMockTransport

log = structlog.get_logger("gateway.services")
reconcile_log = structlog.get_logger("gateway.reconciliation")
HEALTH_REFRESH_S = 1.0
LOOP_LAG_PROBE_S = 0.1  # ten timers a second: nothing against the requests it watches
REDIS_CONFIG_TIMEOUT_S = 5.0


@dataclass
class Services:
    settings: Settings
    table: DeploymentTable
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    redis: RedisClient | None
    key_cache: KeyCache
    buffer: UsageBuffer
    writer: UsageWriter
    pins: PinStore
    health: HealthBoard
    executor: Executor
    proxy: ProxyService
    metrics: Metrics
    limiter: Limiter
    pipeline: ProxyPipeline
    file_slots: FileSlots  # uploads and batch creates at once (files.max_concurrent)
    responses: StoredResponses  # the Responses kept for their team (`store: true`), their continuations
    # requests with an Idempotency-Key: their answers kept for their repeats (in Redis when there is one)
    idempotency: IdempotentRequests
    file_store: FileStore | None = None  # where the Files API keeps bytes; None: the database
    started_at: float = field(default_factory=time.time)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    job_runner: JobRunner | None = None  # this process's share of the Batch API's jobs
    # failed key attempts per client, for the admin API and the console's sign-in (in Redis when
    # there is one)
    key_attempts: KeyAttempts = field(default_factory=lambda: KeyAttempts(None))
    # what usage reports, usage endpoints and console pages read through: a read replica's
    # (GATEWAY_DATABASE_READ_URL, the primary's while it is unreachable) or, without one, the primary's
    read_engine: AsyncEngine | None = None
    report_sessions: SessionSource | None = None
    telemetry: Telemetry | None = None  # OpenTelemetry traces and GenAI metrics; None: not configured

    def start_background(self) -> None:
        self.tasks.append(asyncio.create_task(self._reconcile_spend(), name="spend-reconcile"))
        self.tasks.append(asyncio.create_task(self.writer.run(), name="usage-writer"))
        self.tasks.append(asyncio.create_task(self.responses.store.run(), name="stored-responses"))
        self.tasks.append(asyncio.create_task(self._refresh_health(), name="health-refresh"))
        self.tasks.append(asyncio.create_task(watch_loop_lag(self.metrics), name="loop-lag"))
        if self.metrics.shared:  # this worker's own gauges, for the scrapes the others answer
            self.tasks.append(asyncio.create_task(self.metrics.publish_every(), name="metrics-publish"))
        self.executor.scheduler.start()
        if self.settings.run_jobs and self.settings.catalog.jobs.runner:
            self.start_jobs()
        if any(reconcilable(p) for p in self.settings.catalog.providers):  # one process at a time works
            reconciling = reconcile_daily(self.sessions, self.settings.catalog, self.metrics, reconcile_log)
            self.tasks.append(asyncio.create_task(reconciling, name="reconciliation"))
        if self.redis is not None:
            self.tasks.append(
                asyncio.create_task(self.key_cache.run_invalidation_listener(), name="key-invalidation")
            )
            self.tasks.append(
                asyncio.create_task(warn_if_redis_forgets(self.redis), name="redis-persistence")
            )

    def start_jobs(self) -> JobRunner:
        """Claim and run Batch API jobs in this process: a serving worker's share, or all that a
        `gateway job-runner` process does."""
        self.job_runner = JobRunner(self)
        self.tasks.append(asyncio.create_task(self.job_runner.run(), name="batch-jobs"))
        return self.job_runner

    def job_created(self) -> None:
        """A Batch API job was just committed here: this process's runner claims it now."""
        if self.job_runner is not None:
            self.job_runner.wake()

    async def _reconcile_spend(self) -> None:
        """Month spend from the records into the limiter: a cold Redis or a restart loses no budget."""
        try:
            spend = await reconcile(self.limiter, self.sessions, time.time())
        except Exception as exc:  # a down database must not stop the gateway; counters stay as they are
            log.warning("spend_reconcile_failed", error=type(exc).__name__)
            return
        log.info("spend_reconciled", month=spend.month, teams=len(spend.teams), keys=len(spend.keys))

    async def _refresh_health(self) -> None:
        while True:
            await self.health.refresh()
            await asyncio.sleep(HEALTH_REFRESH_S)

    async def aclose(self) -> None:
        """Graceful stop: hand the batch jobs back, drain metering (nothing buffered is lost), then
        close clients."""
        if self.job_runner is not None:
            await self.job_runner.stop()
        await self.writer.stop(drain_timeout_s=10.0)
        await self.responses.store.stop(drain_timeout_s=10.0)
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.executor.aclose()
        if self.file_store is not None:
            with contextlib.suppress(Exception):  # a store gone away has nothing left to flush
                await self.file_store.aclose()
        with contextlib.suppress(Exception):  # Redis gone: the start-up reconcile restores the spend
            await self.limiter.aclose()
        if self.redis is not None:
            await self.redis.aclose()
        if self.read_engine is not None and self.read_engine is not self.engine:
            await self.read_engine.dispose()
        await self.engine.dispose()
        if self.telemetry is not None:  # the last spans and metrics out (the SDK blocks while it sends)
            await asyncio.to_thread(self.telemetry.shutdown)


async def warn_if_redis_forgets(redis: RedisClient) -> None:
    """Warn once when Redis keeps nothing on disk (no RDB snapshots, no append-only file): the usage
    events not yet written and the month's spend counters would not survive its restart. A managed
    Redis may refuse CONFIG; then nothing is known and only a debug line says so."""
    try:
        async with asyncio.timeout(REDIS_CONFIG_TIMEOUT_S):
            save = (await redis.config_get("save")).get("save")
            appendonly = (await redis.config_get("appendonly")).get("appendonly")
    except (RedisError, OSError) as exc:  # NOPERM, an unknown (renamed) command, Redis away
        log.debug("redis_persistence_unknown", error=type(exc).__name__)
        return
    if not save and appendonly != "yes":
        log.warning(
            "redis_not_persistent",
            detail="Redis has save '' and appendonly no: the metering buffer (usage events not yet "
            "written) and the spend counters would not survive a Redis restart; see docs/operations.md",
        )


async def watch_loop_lag(metrics: Metrics, interval_s: float = LOOP_LAG_PROBE_S) -> None:
    """Observe how late the loop wakes a sleep of `interval_s`: a worker short of CPU (a burst of
    requests, a busy core) shows here before it shows anywhere else. uvloop's timers have a
    millisecond's resolution, so lateness under ~1 ms is timer noise."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        metrics.observe_loop_lag(max(0.0, loop.time() - due))


def open_services(settings: Settings) -> Services:
    catalog = settings.catalog
    table = DeploymentTable.from_catalog(catalog)
    deployment_ids = [d.id for d in table.all()]
    engine = create_engine(settings.database_url)
    sessions = session_factory(engine)
    read_engine = open_read_engine(settings.database_read_url, engine)
    redis: RedisClient | None = None
    batcher: PipelineBatcher | None = None
    buffer: UsageBuffer
    health: HealthBoard
    pins: PinStore
    limiter: Limiter
    if settings.redis_url:
        redis = redis_client(settings.redis_url)
        durability = durability_of(settings.redis_url)  # WAIT after the writes a failover must keep
        # a request's usage append and spend settle: one round trip
        batcher = PipelineBatcher(redis, durability=durability)
        buffer = RedisStreamBuffer(redis, consumer=process_consumer_name(), batcher=batcher)
        health = RedisHealthBoard(redis, deployment_ids, catalog.circuit)
        pins = RedisPinStore(redis, catalog.batches.idle_ttl_s, durability=durability)
        limiter = RedisLimiter(
            redis,
            batcher=batcher,
            records=RecordedSpend(sessions),
            hold_ttl_s=catalog.limits.reservation_ttl_s,
        )
    else:
        buffer = MemoryBuffer()
        health = HealthBoard(deployment_ids, catalog.circuit)
        pins = MemoryPinStore(catalog.batches.idle_ttl_s)
        limiter = MemoryLimiter(records=RecordedSpend(sessions), hold_ttl_s=catalog.limits.reservation_ttl_s)
    metrics = Metrics(settings.metrics_dir)
    scheduler = Scheduler(
        catalog, permit_bank(catalog, redis, batcher), observe_wait=metrics.observe_queue_wait
    )
    metrics.watch_scheduler(scheduler)
    telemetry = open_telemetry(settings)  # in the lifespan: each worker its own, after the fork
    response_owners = ResponseOwners(sessions, redis)
    responses = StoredResponses(
        ResponseStore(sessions, redis, settings.responses_retention_days), response_owners
    )
    executor = Executor(
        catalog,
        health,
        UpstreamPool(),
        mock=in_process_mock(catalog),
        scheduler=scheduler,
    )
    proxy = ProxyService(
        table,
        pins,
        health,
        executor,
        buffer,
        catalog.retry,
        on_event=metrics.observe_event,
        settle=limiter.settle,
        response_owners=response_owners,
        telemetry=telemetry,
        stored_responses=responses,
        scheduling=catalog.scheduling,
    )
    key_cache = KeyCache(
        key_state_loader(sessions),
        settings.key_cache_ttl_s,
        redis,
        unknown_ttl_s=settings.key_cache_unknown_ttl_s,
    )
    return Services(
        settings=settings,
        table=table,
        engine=engine,
        sessions=sessions,
        read_engine=read_engine,
        report_sessions=sessions if read_engine is engine else ReplicaSessions(read_engine, sessions),
        redis=redis,
        key_cache=key_cache,
        key_attempts=KeyAttempts(redis, admin_key=settings.admin_key),
        buffer=buffer,
        writer=UsageWriter.configured(settings, _worker_writes(settings, buffer), sessions),
        pins=pins,
        health=health,
        executor=executor,
        proxy=proxy,
        metrics=metrics,
        limiter=limiter,
        pipeline=ProxyPipeline(
            key_cache,
            limiter,
            proxy,
            metrics,
            catalog.limits.max_messages,
            Reservations(table, catalog.limits.default_max_tokens),
            KeyStreams(catalog.limits.max_streams_per_key),
            telemetry,
        ),
        telemetry=telemetry,
        file_store=open_file_store(catalog.files),
        file_slots=FileSlots(catalog.files.max_concurrent, catalog.files.busy_wait_s),
        responses=responses,
        idempotency=open_idempotency(settings, redis, metrics.count_idempotent),
    )


def permit_bank(
    catalog: Catalog, redis: RedisClient | None, batcher: PipelineBatcher | None
) -> PermitBank | None:
    """Capacity permits shared by every process through Redis when there is one and a provider
    caps its replicas; else None: each process counts its own."""
    capped = any(
        p.capacity is not None and (p.capacity.max_concurrency or p.capacity.max_tokens_in_flight)
        for p in catalog.providers
    )
    if redis is None or batcher is None or not capped:
        return None
    return RedisPermits(redis, batcher, lease_s=catalog.scheduling.permit_lease_s)


def in_process_mock(catalog: Catalog) -> UpstreamClient | None:
    """The upstream of the `mock` provider kind, served in this process, when the catalog has one."""
    if not any(p.kind is ProviderKind.MOCK for p in catalog.providers):
        return None
    return HttpxUpstream(InProcessMockTransport(MockBehaviour()))


def _worker_writes(settings: Settings, buffer: UsageBuffer) -> UsageBuffer:
    """What this process's own writer moves into the database: everything, or with a writer process
    (`GATEWAY_METERING_WRITER`), only the events it spooled while Redis was unreachable."""
    if isinstance(buffer, RedisStreamBuffer) and settings.metering_writer in ("process", "external"):
        return buffer.spool
    return buffer


# What a handler or another dependency declares to receive the services. Litestar checks a
# dependency's value against its declared type unless told not to, and msgspec cannot describe this
# dataclass (its fields hold clients of union types).
ServicesDependency = NamedDependency[SkipValidation[Services]]


def provide_services(request: ASGIConnection) -> Services:
    """The `services` dependency every handler and guard declares (gateway.app registers it once).
    Its parameter is named `request`, a name Litestar fills with the connection; any other would be
    read as a query parameter."""
    services: Services = request.app.state.services
    return services
