"""SIGKILL of a `gateway job-runner` process while a job's lines are in flight, then the job resumed,
cancelled or expired by another runner: every line run the upstream served has its one record (the
runs cut off by the kill an estimated one, 499 `attempt_lost`). Served upstream (the mock's own
count) = records, printed as each scenario's exactly-once row."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from tests.faults.conftest import FaultStack, StackFactory
from tests.faults.records import records_of, report_gap
from tests.integration.jobs.conftest import Owner, add_job
from tests.support.children import die_with_parent, stop
from tests.unit.auth.records import add_key, add_team

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

REPO = Path(__file__).resolve().parents[3]
LINES, IN_FLIGHT, LATENCY_MS = 60, 4, 500  # a run spends nearly all its time at the upstream
FINAL = ("completed", "cancelled", "expired", "failed")
Sessions = async_sessionmaker[AsyncSession]


@pytest.fixture
async def job_stack(fault_stack: StackFactory) -> AsyncIterator[tuple[FaultStack, Sessions]]:
    """A fresh database and Redis db with no gateway serving (no process but the runners claims
    jobs), migrated as the migration job leaves it."""
    stack = fault_stack(gateways=0)
    await upgrade_head_async(stack.database_url)
    engine = create_engine(stack.database_url)
    yield stack, session_factory(engine)
    await engine.dispose()


def start_runner(stack: FaultStack, config: Path) -> subprocess.Popen[bytes]:
    environment = {
        "GATEWAY_CONFIG": str(config),
        "GATEWAY_DATABASE_URL": stack.database_url,
        "GATEWAY_REDIS_URL": stack.redis_url or "",
        "GATEWAY_METERING_WRITER": "external",
        "GATEWAY_LOG_FORMAT": "json",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "job-runner"],
        cwd=REPO,
        env=os.environ | environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )


async def fetch(database_url: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url, timeout=5)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def wait_for(check: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("then", ["resumed", "cancelled", "expired"])
async def test_runs_in_flight_at_a_sigkill_are_metered_once_whatever_ends_the_job(
    job_stack: tuple[FaultStack, Sessions],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
    then: str,
) -> None:
    stack, sessions = job_stack
    config = tmp_path / "runner.yaml"
    config.write_text(
        (tmp_path / "gateway.yaml").read_text()
        + f"jobs: {{lease_s: 2, poll_interval_s: 0.1, concurrency: {IN_FLIGHT}, pause_s: 0.3}}\n"
    )
    team = await add_team(sessions, name=f"crash-{then}")
    key, _ = await add_key(sessions, team.id)
    bodies = [
        {
            "model": "chat",
            "messages": [{"role": "user", "content": f"question {n}"}],
            "mock": {"latency_ms": LATENCY_MS},
        }
        for n in range(LINES)
    ]
    job_id = await add_job(sessions, Owner(team.id, key.id), bodies, model="chat")
    before = int(stack.stores.upstream.stats()["total"])

    async def lines_done(at_least: int) -> bool:
        rows = await fetch(
            stack.database_url,
            "SELECT count(*) AS n FROM batch_lines WHERE job_id = $1 AND state <> 'pending'",
            job_id,
        )
        return int(rows[0]["n"]) >= at_least

    first = start_runner(stack, config)
    try:
        await wait_for(lambda: lines_done(2 * IN_FLIGHT))
        await asyncio.sleep(LATENCY_MS / 2000)  # mid-way through the next runs
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        stop(first)
    if then == "cancelled":
        await fetch(
            stack.database_url,
            "UPDATE batch_jobs SET status = 'cancelling', cancelling_at = now() WHERE id = $1",
            job_id,
        )
    elif then == "expired":
        await fetch(stack.database_url, "UPDATE batch_jobs SET expires_at = now() WHERE id = $1", job_id)

    async def final() -> bool:
        rows = await fetch(stack.database_url, "SELECT status FROM batch_jobs WHERE id = $1", job_id)
        return rows[0]["status"] in FINAL

    second = start_runner(stack, config)
    try:
        await wait_for(final)
    finally:
        second.send_signal(signal.SIGTERM)
        stop(second, timeout_s=15)

    [job] = await fetch(
        stack.database_url, "SELECT status, request_completed FROM batch_jobs WHERE id = $1", job_id
    )
    records = await records_of(stack.database_url, team.id)
    lost = [r for r in records.values() if r["error_code"] == "attempt_lost"]
    gap = report_gap(
        record_property,
        f"job_sigkill_then_{then}",
        requests=LINES,
        served_upstream=int(stack.stores.upstream.stats()["total"]) - before,
        records=len(records),
        spend=f"{job['request_completed']} lines answered, {len(lost)} runs lost at the kill",
    )
    assert job["status"] == ("completed" if then == "resumed" else then)
    assert gap == 0
    assert 0 < len(lost) <= IN_FLIGHT
