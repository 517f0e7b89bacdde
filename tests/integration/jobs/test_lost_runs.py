"""Runs in flight when their process dies are recorded, once: the next holder of the job, whether it
resumes it, finishes its cancel or expires it, gives each run written down and never ended an
estimated record (499 `attempt_lost`), and a re-run has its own. What the upstream served (the
mock's own count) equals what was recorded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import msgspec
import pytest
from sqlalchemy import update

from gateway.db.models import BatchJob
from gateway.db.teams import utcnow
from gateway.jobs.runner import JobRunner
from gateway.services import Services
from tests.integration.jobs.conftest import (
    JOBS,
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
    job_row,
)
from tests.integration.jobs.test_runner_postgres import (
    LOST,
    assert_one_line_per_custom_id,
    cancel,
    eventually,
    file_lines,
    finished_lines_at_least,
    run_to_end,
    usage_records,
)
from tests.support.catalogs import provider
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

pytestmark = pytest.mark.integration
LINES, IN_FLIGHT = 40, 4


@pytest.fixture
def upstream() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture(latency_ms=400)  # a run spends nearly all its time upstream


async def killed_mid_job(services: Services, job_id: str, upstream: RunningUpstream) -> None:
    """Run the job until some lines are stored and the next runs have reached the upstream, then
    stop its runner as a SIGKILL would: no more renewals, nothing released, the runs in flight cut
    off. (A run written down but killed before its request left is recorded as lost too, though
    nothing served it: the kill waits for the upstream so the served count is exact.)"""
    runner = JobRunner(services, owner="killed")
    task = asyncio.create_task(runner.run())
    await eventually(lambda: finished_lines_at_least(services.sessions, job_id, 2 * IN_FLIGHT))
    await eventually(lambda: reached_upstream(upstream, 3 * IN_FLIGHT))
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def reached_upstream(upstream: RunningUpstream, count: int) -> bool:
    stats = await asyncio.to_thread(upstream.stats)
    return int(stats["total"]) >= count


async def expire(services: Services, job_id: str) -> None:
    async with services.sessions.begin() as session:
        await session.execute(update(BatchJob).where(BatchJob.id == job_id).values(expires_at=utcnow()))


@pytest.mark.parametrize("then", ["resumed", "cancelled", "expired"])
async def test_runs_in_flight_at_a_kill_are_recorded_once_whatever_ends_the_job(
    make_services: ServicesFactory, owner: Owner, upstream: RunningUpstream, then: str
) -> None:
    vllm = provider("vllm", region="eu", base_url=f"{upstream.base_url}/v1")
    services = make_services(catalog_with(vllm, msgspec.structs.replace(JOBS, concurrency=IN_FLIGHT)))
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(LINES)])
    upstream.clear()

    await killed_mid_job(services, job_id, upstream)
    if then == "cancelled":
        await cancel(services.sessions, job_id)
    elif then == "expired":
        await expire(services, job_id)
    job = await run_to_end(services, job_id, JobRunner(services, owner="next"))

    served = upstream.stats()["total"]
    records = await usage_records(services.sessions, job_id)
    lost = [r for r in records if r.error_code == LOST]
    print(f"\nkilled, then {then}: served {served}, records {len(records)} ({len(lost)} lost runs)")
    assert job.status == ("completed" if then == "resumed" else then)
    assert served == len(records) and len({r.request_id for r in records}) == len(records)
    assert 0 < len(lost) <= IN_FLIGHT
    assert all((r.status, r.usage_source) == (499, "estimated") and r.prompt_tokens > 0 for r in lost)
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, LINES)
    # the Batch object's usage is its answered runs', as its output lines'
    answered = [r for r in records if r.error_code != LOST]
    assert (await job_row(services.sessions, job_id)).prompt_tokens == sum(r.prompt_tokens for r in answered)
    # a lost run's line ran again under a request id of its own, or never ran again
    answered = {line["custom_id"]: line["response"]["request_id"] for line in output}
    for record in lost:
        rerun = answered.get(f"req-{record.request_id.split('-')[1]}")
        assert rerun != record.request_id
