"""Batch jobs inside their key's limits, through `gateway serve` and the `openai` SDK's Batch API: a
team's budget stops what its jobs spend, its requests/min pace them, and revoking the job's key
stops it, whether the gateway runs its lines or the provider's own batch API does. Each scenario
prints its exactly-once row (served upstream = records)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import asyncpg
import httpx
import pytest
import redis
from openai import OpenAI

from gateway.limits.spend import from_units, spend_key
from tests.faults.conftest import ADMIN_KEY, FaultStack, StackFactory
from tests.faults.records import records_of, report_gap
from tests.support.gateway import GatewayProcess
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

FINAL = ("completed", "failed", "expired", "cancelled")


def job_lines(count: int, latency_ms: int = 0) -> bytes:
    lines = []
    for n in range(count):
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": f"question {n}"}],
            "max_tokens": 16,
            "mock": {"latency_ms": latency_ms},
        }
        lines.append(
            json.dumps({"custom_id": f"q-{n}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        )
    return ("\n".join(lines) + "\n").encode()


def start_job(stack: FaultStack, key: str, count: int, latency_ms: int = 0) -> tuple[OpenAI, str]:
    client = OpenAI(base_url=f"{stack.urls[0]}/v1", api_key=key, max_retries=0)
    uploaded = client.files.create(
        file=("lines.jsonl", io.BytesIO(job_lines(count, latency_ms))), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return client, batch.id


async def batch_when(
    client: OpenAI, batch_id: str, done: Callable[[object], bool], timeout_s: float = 90.0
) -> object:
    async with asyncio.timeout(timeout_s):
        while True:
            batch = await asyncio.to_thread(client.batches.retrieve, batch_id)
            if done(batch):
                return batch
            await asyncio.sleep(0.2)


def served(stack: FaultStack) -> int:
    return int(stack.stores.upstream.stats()["total"])


async def test_a_spent_budget_fails_the_rest_of_a_job_with_insufficient_quota(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=1)
    budget = Decimal("0.0001")  # three lines or so at the catalog's price
    team_id, key = stack.new_team("job-budget")
    with stack.admin() as admin:
        assert (
            admin.patch(f"/admin/teams/{team_id}", json={"monthly_budget_usd": str(budget)}).status_code
            == 200
        )
    before = served(stack)
    client, batch_id = start_job(stack, key, 200)

    batch = await batch_when(client, batch_id, lambda b: b.status in FINAL)

    records = await records_of(stack.database_url, team_id)
    spend = sum((r["cost"] for r in records.values()), Decimal(0))
    errors = [json.loads(line) for line in client.files.content(batch.error_file_id).text.splitlines()]
    gap = report_gap(
        record_property,
        "job_budget",
        requests=200,
        served_upstream=served(stack) - before,
        records=len(records),
        spend=spend,
        limit=f"budget ${budget}",
    )
    assert batch.status == "completed" and spend <= budget and gap == 0
    assert batch.request_counts.completed == len(records) < 200
    assert {e["response"]["body"]["error"]["code"] for e in errors} == {"insufficient_quota"}


async def test_a_rate_limit_paces_a_job_without_failing_its_lines(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=1)
    rpm = 3
    team_id, key = stack.new_team("job-rate")
    with stack.admin() as admin:
        assert admin.patch(f"/admin/teams/{team_id}", json={"rpm_limit": rpm}).status_code == 200
    before = served(stack)
    client, batch_id = start_job(stack, key, 200)
    started = time.monotonic()

    await batch_when(client, batch_id, lambda b: b.status == "in_progress")
    await asyncio.sleep(8.0)
    await asyncio.to_thread(client.batches.cancel, batch_id)
    batch = await batch_when(client, batch_id, lambda b: b.status in FINAL)
    elapsed = time.monotonic() - started

    records = await records_of(stack.database_url, team_id)
    allowed = rpm + int(elapsed * rpm / 60) + 1  # a full bucket, then its refill
    gap = report_gap(
        record_property,
        "job_rate",
        requests=200,
        served_upstream=served(stack) - before,
        records=len(records),
        spend=f"{len(records)} lines in {elapsed:.0f} s",
        limit=f"rpm {rpm} (at most {allowed})",
    )
    assert batch.status == "cancelled" and gap == 0
    assert batch.request_counts.failed == 0  # paced, not failed
    assert 0 < len(records) <= allowed


async def test_revoking_a_jobs_key_stops_the_job_within_seconds(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=1)
    with stack.admin() as admin:
        team = admin.post("/admin/teams", json={"name": "job-revoked"}).json()
        created = admin.post("/admin/keys", json={"team_id": team["id"], "name": "jobs"}).json()
    before = served(stack)
    client, batch_id = start_job(stack, created["key"], 2000, latency_ms=20)

    await batch_when(client, batch_id, lambda b: b.request_counts.completed >= 100)
    with stack.admin() as admin:
        assert admin.delete(f"/admin/keys/{created['id']}").status_code == 200
    revoked_at = time.time()
    status = await batch_status_as_admin(stack, batch_id, team["id"])

    records = await records_of(stack.database_url, team["id"])
    after = len([r for r in records.values() if r["created_at"].timestamp() > revoked_at])
    gap = report_gap(
        record_property,
        "job_revoked",
        requests=2000,
        served_upstream=served(stack) - before,
        records=len(records),
        spend=f"{len(records)} lines, {after} begun after the revocation",
        limit="key revoked",
    )
    assert status == "failed" and gap == 0
    assert len(records) < 2000


async def batch_status_as_admin(
    stack: FaultStack, batch_id: str, team_id: str, timeout_s: float = 60.0
) -> str:
    """The job's final status, read from the database (its key no longer reads it)."""
    async with asyncio.timeout(timeout_s):
        while True:
            conn = await asyncpg.connect(stack.database_url)
            try:
                status = await conn.fetchval(
                    "SELECT status FROM batch_jobs WHERE id = $1 AND team_id = $2", batch_id, team_id
                )
            finally:
                await conn.close()
            if status in FINAL:
                return str(status)
            await asyncio.sleep(0.2)


# A gateway whose `chat` runs batch jobs on the provider's own batch API (the mock's OpenAI one)
PROVIDER_RUN_CONFIG = """
providers:
  - name: up-batch
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret
    batch_execution: provider
models:
  - name: chat
    deployments:
      - provider: up-batch
        model: upstream-chat
        price: {{input: 0.50, output: 1.50, batch_input: 0.25, batch_output: 0.75}}
jobs: {{poll_interval_s: 0.2}}
"""


async def test_revoking_a_provider_run_jobs_key_cancels_its_provider_batch_and_bills_what_ran(
    fault_stack: StackFactory, record_property: Callable[[str, object], None], tmp_path: Path
) -> None:
    """The provider's batch runs its 200 lines over 10 s; the key is revoked at ~4 s. What the
    provider ran (its own count) has one record each, and the team's spend counter holds them."""
    stack = fault_stack(gateways=0)
    upstream = start_mock_upstream(batch_delay_ms=10_000)
    config = tmp_path / "provider-run.yaml"
    config.write_text(PROVIDER_RUN_CONFIG.format(upstream=upstream.base_url))
    env = {"GATEWAY_DATABASE_URL": stack.database_url, "GATEWAY_REDIS_URL": stack.redis_url or "",
           "GATEWAY_ADMIN_KEY": ADMIN_KEY, "GATEWAY_LOG_FORMAT": "json"}  # fmt: skip
    gateway = GatewayProcess(config, env)
    try:
        stack.gateways.append(gateway.start())
        with stack.admin() as admin:
            team = admin.post(
                "/admin/teams", json={"name": "provider-job-revoked", "monthly_budget_usd": "1"}
            )
            team_id = team.json()["id"]
            created = admin.post("/admin/keys", json={"team_id": team_id, "name": "jobs"}).json()
        client, batch_id = start_job(stack, created["key"], 200)
        await batch_when(client, batch_id, lambda b: b.status == "in_progress")
        await asyncio.sleep(4.0)
        with stack.admin() as admin:
            assert admin.delete(f"/admin/keys/{created['id']}").status_code == 200
        revoked_at = time.monotonic()
        status = await batch_status_as_admin(stack, batch_id, team_id)
        stopped_in = time.monotonic() - revoked_at
        ran, cancels = provider_batches_ran(upstream)
    finally:
        gateway.stop()
        upstream.stop()

    records = await records_of(stack.database_url, team_id)
    spend = sum((r["cost"] for r in records.values()), Decimal(0))
    counter = team_counter(stack, team_id)
    gap = report_gap(
        record_property,
        "provider_job_revoked",
        requests=200,
        served_upstream=ran,
        records=len(records),
        spend=f"${spend} (the team's counter ${counter}); failed in {stopped_in:.1f} s",
        limit="key revoked, budget $1",
    )
    assert status == "failed" and gap == 0 and cancels == 1
    assert 0 < len(records) < 200 and counter == spend


def provider_batches_ran(upstream: RunningUpstream) -> tuple[int, int]:
    """(lines the mock's batches ran, by its own counts; cancels it was asked for)."""
    requests = upstream.requests()
    read = {r["path"] for r in requests if r["method"] == "GET" and r["path"].startswith("/v1/batches/")}
    cancels = sum(1 for r in requests if r["method"] == "POST" and r["path"].endswith("/cancel"))
    headers = {"authorization": "Bearer upstream-secret"}
    ran = 0
    for path in read:
        counts = (
            httpx.get(upstream.base_url + path, headers=headers).raise_for_status().json()["request_counts"]
        )
        ran += int(counts["completed"]) + int(counts["failed"])
    return ran, cancels


def team_counter(stack: FaultStack, team_id: str) -> Decimal:
    """The limiter's month spend counter of the team, read from its Redis."""
    assert stack.redis_url is not None
    client = redis.Redis.from_url(stack.redis_url)
    try:
        units = client.get(spend_key("team", team_id, time.strftime("%Y-%m", time.gmtime())))
    finally:
        client.close()
    return from_units(int(units or 0))
