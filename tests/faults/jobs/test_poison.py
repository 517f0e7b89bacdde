"""A poisoned line: one that the input checks accept but whose send breaks every time (the answer
cannot be handled: a RecursionError, injected at the seam between the executor and the network,
after the mock upstream served the request). The job completes with that line failed alone, and
every request the upstream served has its record: served upstream (the mock's count) = records."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.db.migrate import upgrade_head_async
from gateway.dispatch.executor import Executor
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.jobs.runner import MAX_LINE_FAILURES, JobRunner
from gateway.services import Services, open_services
from gateway.settings import load_settings
from tests.faults.conftest import FaultStack, StackFactory
from tests.faults.records import records_of, report_gap
from tests.integration.jobs.conftest import Owner, add_job, job_row
from tests.integration.jobs.test_line_failures import POISON, BreakingUpstream
from tests.unit.auth.records import add_key, add_team

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

LINES = 300
FINAL = ("completed", "cancelled", "expired", "failed")


@pytest.fixture
async def services(fault_stack: StackFactory, tmp_path: Path) -> AsyncIterator[tuple[FaultStack, Services]]:
    """The fault stack's stores and mock upstream, with the runner in this process (no gateway
    serving), so that its network client can be the breaking one."""
    stack = fault_stack(gateways=0)
    await upgrade_head_async(stack.database_url)
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(tmp_path / "gateway.yaml"),  # the stack's catalog
            "GATEWAY_DATABASE_URL": stack.database_url,
            "GATEWAY_REDIS_URL": stack.redis_url or "",
        }
    )
    services = open_services(settings)
    try:
        yield stack, services
    finally:
        await services.aclose()


async def test_a_poisoned_line_fails_alone_and_every_served_request_is_recorded(
    services: tuple[FaultStack, Services], record_property: Callable[[str, object], None]
) -> None:
    stack, opened = services
    breaking = BreakingUpstream(UpstreamPool(), after=True)
    executor = Executor(opened.settings.catalog, opened.health, breaking)
    team = await add_team(opened.sessions, name="poisoned")
    key, _ = await add_key(opened.sessions, team.id)
    bodies = [
        {"model": "chat", "messages": [{"role": "user", "content": f"question {n}"}], "max_tokens": 16}
        for n in range(LINES)
    ]
    bodies[7]["messages"][0]["content"] = POISON.decode()
    job_id = await add_job(opened.sessions, Owner(team.id, key.id), bodies, model="chat")
    before = int(stack.stores.upstream.stats()["total"])
    runner = JobRunner(dataclasses.replace(opened, executor=executor))
    task = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(90):
            while (job := await job_row(opened.sessions, job_id)).status not in FINAL:
                await asyncio.sleep(0.2)
    finally:
        await runner.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await executor.aclose()

    records = await records_of(stack.database_url, team.id)
    broke = [r for r in records.values() if r["error_code"] == "line_failed"]
    gap = report_gap(
        record_property,
        "job_poisoned_line",
        requests=LINES,
        served_upstream=int(stack.stores.upstream.stats()["total"]) - before,
        records=len(records),
        spend=f"{job.request_completed} answered, {job.request_failed} failed alone after {len(broke)} runs",
    )
    assert (job.status, job.request_completed, job.request_failed) == ("completed", LINES - 1, 1)
    assert len(broke) == MAX_LINE_FAILURES
    assert gap == 0
