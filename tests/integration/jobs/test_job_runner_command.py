"""`gateway job-runner` as a process of its own, on real PostgreSQL (database
gateway_test_job_runner_command) and a private Redis, against the mock upstream as a process: it
runs a job to its end, and on SIGTERM mid-job it exits at once and gives the job's lease back, so
the next runner resumes it; `GATEWAY_RUN_JOBS=false` keeps serving processes from claiming jobs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import BatchLine, UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.services import open_services
from gateway.settings import ConfigError, load_settings
from tests.faults.stores import PrivateRedis
from tests.integration.jobs.conftest import Owner, add_job, chat_body, job_row
from tests.support.children import die_with_parent, stop
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url
from tests.support.upstream import RunningUpstream, mock_upstream_fixture
from tests.unit.auth.records import add_key, add_team

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
DATABASE = "gateway_test_job_runner_command"
DATABASE_URL = postgres_url(DATABASE)
Sessions = async_sessionmaker[AsyncSession]
STOP_TIMEOUT_S = 15.0  # the writer drain bound (10 s) and closing: what terminationGracePeriodSeconds covers


@pytest.fixture(scope="module")
async def migrated() -> str:
    """A fresh database brought to head by the migrations, as the migration Job leaves it."""
    conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await conn.close()
    await upgrade_head_async(DATABASE_URL)
    return DATABASE_URL


@pytest.fixture
async def sessions(migrated: str) -> AsyncIterator[Sessions]:
    engine = create_engine(migrated)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[PrivateRedis]:
    server = PrivateRedis(appendonly=False).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture(latency_ms=100)


@pytest.fixture
async def owner(sessions: Sessions) -> Owner:
    team = await add_team(sessions, name=f"team-{os.urandom(4).hex()}")
    key, _ = await add_key(sessions, team.id)
    return Owner(team.id, key.id)


@pytest.fixture
def environment(
    tmp_path: Path, migrated: str, redis_server: PrivateRedis, upstream: RunningUpstream
) -> dict[str, str]:
    """What a job-runner pod's environment holds: the catalog, the stores, the writer left outside."""
    catalog = tmp_path / "gateway.yaml"
    catalog.write_text(
        f"""
providers:
  - {{name: upstream, kind: openai, region: eu, base_url: "{upstream.base_url}/v1", api_key: unused}}
models:
  - name: m
    deployments: [{{provider: upstream, model: m-up, price: {{input: 1, output: 2}}}}]
retry: {{max_attempts: 2, backoff_base_s: 0.01, backoff_max_s: 0.02}}
jobs: {{lease_s: 30, poll_interval_s: 0.05, concurrency: 2, pause_s: 0.3}}
"""
    )
    return {
        "GATEWAY_CONFIG": str(catalog),
        "GATEWAY_DATABASE_URL": migrated,
        "GATEWAY_REDIS_URL": redis_server.url(0),
        "GATEWAY_METERING_WRITER": "external",
        "GATEWAY_LOG_FORMAT": "json",
    }


def start_runner(environment: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "job-runner"],
        cwd=REPO,
        env=os.environ | environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )


async def ended(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    """SIGTERM, then the exit status and what it logged."""
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = await asyncio.to_thread(process.communicate, timeout=STOP_TIMEOUT_S)
    finally:
        stop(process)
    return process.returncode, output.decode()


def logged_events(output: str) -> list[str]:
    return [json.loads(line)["event"] for line in output.splitlines() if line.startswith("{")]


async def lines_done(sessions: Sessions, job_id: str) -> int:
    async with sessions() as session:
        query = select(func.count()).where(BatchLine.job_id == job_id, BatchLine.state != "pending")
        return int((await session.execute(query)).scalar_one())


async def usage_records(sessions: Sessions, job_id: str) -> int:
    async with sessions() as session:
        query = select(func.count()).select_from(UsageRecord).where(UsageRecord.batch_id == job_id)
        return int((await session.execute(query)).scalar_one())


async def records_by_code(sessions: Sessions, job_id: str) -> dict[str | None, int]:
    async with sessions() as session:
        query = (
            select(UsageRecord.error_code, func.count())
            .where(UsageRecord.batch_id == job_id)
            .group_by(UsageRecord.error_code)
        )
        return {code: int(count) for code, count in (await session.execute(query)).all()}


async def wait_until(
    process: subprocess.Popen[bytes], check: Callable[[], Awaitable[bool]], timeout_s: float = 60.0
) -> None:
    """Poll `check()` until true; fail if the process exits first."""
    async with asyncio.timeout(timeout_s):
        while not await check():
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            await asyncio.sleep(0.05)


async def test_it_runs_a_job_to_its_end_then_stops_on_sigterm(
    sessions: Sessions, owner: Owner, environment: dict[str, str]
) -> None:
    job_id = await add_job(sessions, owner, [chat_body(n) for n in range(6)])
    runner = start_runner(environment)

    async def completed() -> bool:
        return (await job_row(sessions, job_id)).status == "completed"

    await wait_until(runner, completed)
    code, output = await ended(runner)

    assert code == 0, output
    job = await job_row(sessions, job_id)
    assert (job.request_completed, job.request_failed) == (6, 0)
    assert job.output_file_id is not None
    assert await usage_records(sessions, job_id) == 6
    events = logged_events(output)
    assert (
        events.index("job_runner_started")
        < events.index("batch_finished")
        < events.index("job_runner_stopped")
    )


async def test_sigterm_mid_job_hands_the_job_back_to_the_next_runner(
    sessions: Sessions, owner: Owner, environment: dict[str, str]
) -> None:
    lines = 40  # two at a time, 100 ms each: seconds of work, so the stop lands mid-job
    job_id = await add_job(sessions, owner, [chat_body(n) for n in range(lines)])
    first = start_runner(environment)

    async def some_done() -> bool:
        return await lines_done(sessions, job_id) >= 2

    await wait_until(first, some_done)
    code, output = await ended(first)

    assert code == 0, output
    job = await job_row(sessions, job_id)
    assert job.status == "in_progress"
    assert (job.lease_owner, job.lease_expires_at) == (None, None)  # released, not left to run out
    done_by_first = await lines_done(sessions, job_id)
    assert 2 <= done_by_first < lines

    second = start_runner(environment)  # the lease is 30 s: only a released job is claimed at once

    async def completed() -> bool:
        return (await job_row(sessions, job_id)).status == "completed"

    await wait_until(second, completed, timeout_s=25)
    code, output = await ended(second)

    assert code == 0, output
    job = await job_row(sessions, job_id)
    assert (job.request_completed, job.request_failed) == (lines, 0)
    # One record per line's answer, none stored twice; and one, estimated, per run the stop cut
    # off in flight (at most `concurrency`): that run may have reached the upstream.
    by_code = await records_by_code(sessions, job_id)
    assert by_code.get(None, 0) == lines
    assert set(by_code) <= {None, "attempt_lost"} and by_code.get("attempt_lost", 0) <= 2


async def test_serving_processes_leave_jobs_to_the_runners_when_told(
    migrated: str, environment: dict[str, str]
) -> None:
    for run_jobs, runs_here in (("false", False), ("", True)):
        settings = load_settings(environment | {"GATEWAY_RUN_JOBS": run_jobs})
        services = open_services(settings)
        try:
            services.start_background()
            assert (services.job_runner is not None) is runs_here
        finally:
            await services.aclose()


def test_a_run_jobs_that_is_not_true_or_false_stops_the_gateway(environment: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="GATEWAY_RUN_JOBS: must be true or false, not 'sometimes'"):
        load_settings(environment | {"GATEWAY_RUN_JOBS": "sometimes"})
