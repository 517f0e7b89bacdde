"""`gateway job-runner`: the Batch API's job runner as a process of its own, serving nothing.

`gateway serve` runs jobs in every worker by default; with `GATEWAY_RUN_JOBS=false` its workers
leave them to these processes, so that a job's lines never compete with interactive requests for
a serving worker's event loop, and the two scale apart. Any number may run: each claims jobs
under a lease (`gateway.jobs.runner`). On SIGTERM or SIGINT a runner stops claiming, stops its
jobs' lines and gives their leases back, so another runner resumes them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import msgspec
import structlog

from gateway.routing.health import HealthBoard
from gateway.services import HEALTH_REFRESH_S, open_services
from gateway.settings import Settings

log = structlog.get_logger("gateway.jobs")


async def run_job_runner(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run batch jobs until SIGTERM or SIGINT (or `stop`), then hand them back."""
    if settings.redis_url:  # the usage stream is the metering writers' (a line's usage record is
        # stored with its outcome): this process's own writer keeps to its spool, which stays empty
        settings = msgspec.structs.replace(settings, metering_writer="external")
    services = open_services(settings)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(signum, stop.set)
    # What a job's lines need of a serving process: capacity permits and load readings (the
    # scheduler), and the circuits other processes open (the health board).
    services.executor.scheduler.start()
    services.tasks.append(asyncio.create_task(_refresh_health(services.health), name="health-refresh"))
    runner = services.start_jobs()
    log.info("job_runner_started", owner=runner.owner)
    try:
        await stop.wait()
    finally:
        await services.aclose()  # stops the jobs and releases their leases first
        log.info("job_runner_stopped", owner=runner.owner)


async def _refresh_health(health: HealthBoard) -> None:
    while True:
        await health.refresh()
        await asyncio.sleep(HEALTH_REFRESH_S)
