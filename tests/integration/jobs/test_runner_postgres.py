"""The job runner against real PostgreSQL and the built-in mock provider (or the mock upstream as a
process): a job runs to its end with one outcome and one usage record per line; a second runner
takes over a dead one's job; cancel, expiry and a failing pinned upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import BatchJob, BatchLine, UsageRecord
from gateway.db.teams import utcnow
from gateway.jobs import ledger
from gateway.jobs.files.repository import file_bytes
from gateway.jobs.ledger import LineOutcome
from gateway.jobs.runner import JobRunner
from gateway.metering.events import UsageEvent
from gateway.services import Services
from gateway.settings import JobSettings
from tests.integration.jobs.conftest import (
    JOBS,
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
    job_row,
)
from tests.support.catalogs import provider
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

pytestmark = pytest.mark.integration
Sessions = async_sessionmaker[AsyncSession]
FINAL = ("completed", "cancelled", "expired", "failed")
LINE_FIELDS = {"id", "custom_id", "response", "error"}  # OpenAI's batch output line
LOST = "attempt_lost"  # the record of a run whose process died with it in flight


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.02)


async def status_is(sessions: Sessions, job_id: str, *statuses: str) -> bool:
    return (await job_row(sessions, job_id)).status in statuses


@contextlib.asynccontextmanager
async def running(runner: JobRunner) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(runner.run())
    try:
        yield task
    finally:
        await runner.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_to_end(services: Services, job_id: str, runner: JobRunner | None = None) -> BatchJob:
    async with running(runner or JobRunner(services)):
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    return await job_row(services.sessions, job_id)


async def file_lines(sessions: Sessions, team_id: str, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    async with sessions() as session:
        data = await file_bytes(session, team_id, file_id)
    return [json.loads(line) for line in data.decode().splitlines()]


async def usage_records(sessions: Sessions, job_id: str) -> list[UsageRecord]:
    async with sessions() as session:
        return list(await session.scalars(select(UsageRecord).where(UsageRecord.batch_id == job_id)))


async def finished_lines(sessions: Sessions, job_id: str) -> int:
    async with sessions() as session:
        query = select(func.count()).where(BatchLine.job_id == job_id, BatchLine.state != "pending")
        return int(await session.scalar(query) or 0)


def assert_one_line_per_custom_id(
    output: list[dict[str, Any]], errors: list[dict[str, Any]], total: int
) -> None:
    custom_ids = [line["custom_id"] for line in output + errors]
    assert sorted(custom_ids) == sorted(f"req-{n}" for n in range(total))
    for lines in (output, errors):  # each file in input order
        numbers = [int(line["custom_id"].removeprefix("req-")) for line in lines]
        assert numbers == sorted(numbers)
    assert len({line["id"] for line in output + errors}) == total


def assert_metered_as_output(job: BatchJob, records: list[UsageRecord], output: list[dict[str, Any]]) -> None:
    """The job's counts, the records of answered runs and the output lines' own usage all agree (a
    run lost with a dead process has an estimated record besides, not in the job's usage)."""
    usage = [line["response"]["body"]["usage"] for line in output]
    answered = [r for r in records if r.error_code != LOST]
    prompt = sum(u["prompt_tokens"] for u in usage)
    completion = sum(u["completion_tokens"] for u in usage)
    cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usage)
    assert sum(r.prompt_tokens for r in answered) == prompt
    assert sum(r.completion_tokens for r in answered) == completion
    assert sum(r.cached_tokens for r in answered) == cached
    assert (job.prompt_tokens, job.completion_tokens, job.cached_tokens) == (prompt, completion, cached)
    assert {r.request_id for r in answered} == {line["response"]["request_id"] for line in output}


async def test_a_job_runs_to_completed_with_each_line_once_in_output_and_metering(
    services: Services, owner: Owner
) -> None:
    bodies = [chat_body(n, system=f"system {n % 4}") for n in range(200)]
    job_id = await add_job(services.sessions, owner, bodies)

    job = await run_to_end(services, job_id)

    assert job.status == "completed"
    assert None not in (job.in_progress_at, job.finalizing_at, job.completed_at)
    assert (job.request_completed, job.request_failed, job.error_file_id) == (200, 0, None)
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    assert len(output) == 200
    assert_one_line_per_custom_id(output, [], 200)
    for n, line in enumerate(output):
        assert set(line) == LINE_FIELDS
        assert line["custom_id"] == f"req-{n}" and line["error"] is None
        assert line["response"]["status_code"] == 200
        assert line["response"]["request_id"] == f"{job_id}-{n}"
        assert line["response"]["body"]["object"] == "chat.completion"
    records = await usage_records(services.sessions, job_id)
    assert len(records) == 200 and {r.status for r in records} == {200}
    assert job.prompt_tokens > 0 and job.completion_tokens > 0
    assert_metered_as_output(job, records, output)
    assert job.lease_expires_at is None  # a finished job holds no lease


async def test_lines_the_upstream_refuses_go_to_the_error_file_with_their_status(
    services: Services, owner: Owner
) -> None:
    refused = {"fail_rate": 1, "fail_status": 400}
    bodies = [chat_body(n, mock=refused) if n % 5 == 0 else chat_body(n) for n in range(20)]
    job_id = await add_job(services.sessions, owner, bodies)

    job = await run_to_end(services, job_id)

    assert (job.status, job.request_completed, job.request_failed) == ("completed", 16, 4)
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 20)
    assert [line["custom_id"] for line in errors] == ["req-0", "req-5", "req-10", "req-15"]
    for line in errors:
        assert set(line) == LINE_FIELDS
        assert line["response"]["status_code"] == 400 and line["error"] is None
        assert "message" in line["response"]["body"]["error"]
    records = await usage_records(services.sessions, job_id)
    assert sorted(r.status for r in records) == [200] * 16 + [400] * 4


async def test_a_second_runner_resumes_a_dead_runners_job_and_each_line_counts_once(
    services: Services, owner: Owner
) -> None:
    slow = {"latency_ms": 20}
    bodies = [chat_body(n, mock=slow) for n in range(200)]
    job_id = await add_job(services.sessions, owner, bodies)
    first, second = JobRunner(services, owner="first"), JobRunner(services, owner="second")
    first_task = asyncio.create_task(first.run())
    await eventually(lambda: asyncio.sleep(0, result=bool(first.holding)))
    assert await second.claim_next() is None  # exactly one holds it
    await eventually(lambda: finished_lines_at_least(services.sessions, job_id, 40))

    first_task.cancel()  # as a SIGKILL: no more renewals, nothing released
    with contextlib.suppress(asyncio.CancelledError):
        await first_task
    done_by_first = await finished_lines(services.sessions, job_id)
    assert done_by_first < 200
    job = await run_to_end(services, job_id, second)

    assert (job.status, job.fencing_token, job.request_completed) == ("completed", 2, 200)
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    assert_one_line_per_custom_id(output, [], 200)
    records = await usage_records(services.sessions, job_id)
    lost = [r for r in records if r.error_code == LOST]
    assert len(records) == 200 + len(lost)  # each answer once; each run cut off in flight once
    assert all((r.status, r.usage_source, r.prompt_tokens > 0) == (499, "estimated", True) for r in lost)
    assert_metered_as_output(job, records, output)
    async with services.sessions() as session:
        tokens = await session.scalars(select(BatchLine.fencing_token).where(BatchLine.job_id == job_id))
        assert set(tokens) == {1, 2}  # some lines stored under each claim


async def finished_lines_at_least(sessions: Sessions, job_id: str, count: int) -> bool:
    return await finished_lines(sessions, job_id) >= count


def line_event(job: BatchJob, line_no: int) -> UsageEvent:
    return UsageEvent(
        request_id=f"{job.id}-{line_no}", created_at=0.0, team_id=job.team_id, key_id=job.key_id,
        model="m", provider="mock", region="eu", deployment="mock/m-up", upstream_model="m-up",
        endpoint="/v1/chat/completions", status=200, batch_id=job.id, prompt_tokens=7, completion_tokens=3,
    )  # fmt: skip


async def test_a_holder_that_lost_its_lease_can_no_longer_write(services: Services, owner: Owner) -> None:
    job_id = await add_job(services.sessions, owner, [chat_body(0), chat_body(1)])
    async with services.sessions() as session:
        stale = await ledger.claim_job(session, "first", 1.0, utcnow())
        assert stale is not None and stale.fencing_token == 1
        assert await ledger.claim_job(session, "second", 1.0, utcnow()) is None  # the lease is fresh
        later = utcnow() + timedelta(seconds=2)  # past the first lease
        current = await ledger.claim_job(session, "second", 1.0, later)
    assert current is not None and current.fencing_token == 2
    job = await job_row(services.sessions, job_id)
    outcome = LineOutcome(0, ledger.SUCCEEDED, 200, "{}", f"{job_id}-0", 1)

    async with services.sessions() as session:
        refused = await ledger.record_outcome(session, stale, outcome, line_event(job, 0), utcnow())
        assert await ledger.renew_lease(session, stale, 1.0, utcnow()) is None
    assert not refused
    assert await finished_lines(services.sessions, job_id) == 0
    assert await usage_records(services.sessions, job_id) == []
    assert (await job_row(services.sessions, job_id)).request_completed == 0

    async with services.sessions() as session:
        assert await ledger.record_outcome(session, current, outcome, line_event(job, 0), utcnow())
        again = await ledger.record_outcome(session, current, outcome, line_event(job, 0), utcnow())
    assert not again  # a line's outcome is stored once
    job = await job_row(services.sessions, job_id)
    assert (job.request_completed, job.prompt_tokens, job.completion_tokens) == (1, 7, 3)
    assert len(await usage_records(services.sessions, job_id)) == 1


async def cancel(sessions: Sessions, job_id: str) -> None:
    """What the API's cancel does."""
    async with sessions.begin() as session:
        await session.execute(
            update(BatchJob).where(BatchJob.id == job_id).values(status="cancelling", cancelling_at=utcnow())
        )


async def test_a_cancelled_job_keeps_its_finished_lines_and_reports_the_rest_cancelled(
    make_services: ServicesFactory, owner: Owner, services: Services
) -> None:
    slow = {"latency_ms": 20}
    job_id = await add_job(services.sessions, owner, [chat_body(n, mock=slow) for n in range(200)])
    runner = JobRunner(make_services(catalog_with(services.settings.catalog.providers[0], few_at_once())))

    async with running(runner):
        await eventually(lambda: finished_lines_at_least(services.sessions, job_id, 20))
        await cancel(services.sessions, job_id)
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    assert job.status == "cancelled" and job.cancelled_at is not None and job.completed_at is None
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 200)
    assert 20 <= len(output) == job.request_completed < 200
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert all(line["response"] is None for line in errors)
    for line in errors[:3]:
        assert set(line) == LINE_FIELDS
    assert len(await usage_records(services.sessions, job_id)) == len(output)


async def test_a_cancel_stops_new_lines_within_two_seconds_between_lease_renewals(
    make_services: ServicesFactory, owner: Owner, services: Services
) -> None:
    # A long lease: its renewals come every 10 s, so only the status checks can see the cancel
    # in time; lines of 100 ms, 4 at once, would keep going out for 10 s otherwise.
    settings = msgspec.structs.replace(JOBS, lease_s=30.0, concurrency=4)
    slow = {"latency_ms": 100}
    job_id = await add_job(services.sessions, owner, [chat_body(n, mock=slow) for n in range(400)])
    runner = JobRunner(make_services(catalog_with(services.settings.catalog.providers[0], settings)))

    async with running(runner):
        await eventually(lambda: finished_lines_at_least(services.sessions, job_id, 8))
        cancelled_at = time.time()
        await cancel(services.sessions, job_id)
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    assert job.status == "cancelled"
    # A line's usage record is stamped when the line starts. The cancel must be seen within 2 s;
    # after that, only lines the runner had begun to start (the in-flight window) may go out.
    starts = [r.created_at.timestamp() for r in await usage_records(services.sessions, job_id)]
    assert len(starts) == job.request_completed >= 8
    assert len([start for start in starts if start > cancelled_at + 2.0]) <= settings.concurrency


async def test_a_job_nobody_holds_in_cancelling_is_finished_by_the_next_claim(
    services: Services, owner: Owner
) -> None:
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(3)])
    await cancel(services.sessions, job_id)

    job = await run_to_end(services, job_id)

    assert (job.status, job.request_completed) == ("cancelled", 0)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert [line["error"]["code"] for line in errors] == ["batch_cancelled"] * 3
    assert await file_lines(services.sessions, owner.team_id, job.output_file_id) == []


async def test_a_job_past_its_window_expires_with_what_it_finished(
    make_services: ServicesFactory, owner: Owner, services: Services
) -> None:
    # 400 lines of 100 ms, 4 at a time, take 10 s; the 3 s window leaves a loaded machine time to
    # start the runner and finish some lines, and ends the job long before it could finish them all
    slow = {"latency_ms": 100}
    bodies = [chat_body(n, mock=slow) for n in range(400)]
    job_id = await add_job(services.sessions, owner, bodies, expires_in_s=3.0)
    runner = JobRunner(make_services(catalog_with(services.settings.catalog.providers[0], few_at_once())))

    job = await run_to_end(services, job_id, runner)

    assert job.status == "expired" and job.expired_at is not None
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 400)
    assert 0 < len(output) == job.request_completed < 400
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}


def few_at_once() -> JobSettings:
    """The test settings with 4 lines in flight: a job of slow lines then lasts a second or more."""
    return msgspec.structs.replace(JOBS, concurrency=4)


@pytest.fixture
def upstream() -> Any:
    yield from mock_upstream_fixture()


async def test_a_failing_pinned_upstream_pauses_the_job_until_it_answers_again(
    make_services: ServicesFactory, owner: Owner, upstream: RunningUpstream
) -> None:
    vllm = provider("vllm", region="eu", base_url=f"{upstream.base_url}/v1")
    services = make_services(catalog_with(vllm))
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(20)])
    upstream.set_behaviour(fail_rate=1, fail_status=503)

    async with running(JobRunner(services)):
        await eventually(lambda: paused(services.sessions, job_id))
        await asyncio.sleep(1.0)  # several pauses and retries
        job = await job_row(services.sessions, job_id)
        assert (job.status, job.request_completed, job.request_failed) == ("in_progress", 0, 0)
        assert await finished_lines(services.sessions, job_id) == 0
        assert job.paused_reason == "pinned deployment unavailable"
        upstream.set_behaviour()
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    assert (job.status, job.request_completed, job.request_failed) == ("completed", 20, 0)
    assert job.paused_reason is None and job.error_file_id is None
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    assert_one_line_per_custom_id(output, [], 20)
    records = await usage_records(services.sessions, job_id)
    assert len([r for r in records if r.status == 200]) == 20
    # each run the failing deployment answered has its record too: an upstream error, no tokens
    refused = [r for r in records if r.status != 200]
    assert refused and all((r.prompt_tokens, r.completion_tokens, r.cost) == (0, 0, 0) for r in refused)
    assert len({r.request_id for r in records}) == len(records)


async def paused(sessions: Sessions, job_id: str) -> bool:
    return (await job_row(sessions, job_id)).paused_reason is not None
