"""How a job's lines go out: in (prefix_key, line_no) order within the in-flight window, and with a
cache key per prompt prefix, so that the lines sharing a system prompt meet one replica."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from sqlalchemy import select

from gateway.auth.principal import Principal
from gateway.db.models import BatchLine
from gateway.db.teams import utcnow
from gateway.jobs import ledger
from gateway.jobs.ledger import LineOutcome, PendingLine
from gateway.jobs.line_sender import BeginRun, LineRun
from gateway.jobs.runner import JobRun, JobRunner
from gateway.routing.directives import Directives
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
from tests.support.catalogs import provider
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.integration
SYSTEMS = [f"You are assistant {n}." for n in range(4)]


class RecordingSender:
    """Stands in for the upstream side of a job run: notes the order lines start in and how many
    are in flight at once, holding each a moment so that the window fills."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives, begin: BeginRun
    ) -> LineRun:
        self.started.append(line.line_no)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)
        finally:
            self.in_flight -= 1
        request_id = f"{job_id}-{line.line_no}"
        return LineRun(
            LineOutcome(line.line_no, ledger.SUCCEEDED, 200, '{"object": "chat.completion"}', request_id, 1)
        )

    async def settle(self, principal: Principal, run: LineRun) -> None:
        return None

    async def release(self, principal: Principal, run: LineRun) -> None:
        return None


async def test_pending_lines_start_grouped_by_prefix_in_input_order_within_the_window(
    services: Services, owner: Owner
) -> None:
    bodies = [chat_body(n, system=SYSTEMS[n % 4]) for n in range(40)]
    job_id = await add_job(services.sessions, owner, bodies)
    async with services.sessions() as session:
        claim = await ledger.claim_job(session, "recorder", JOBS.lease_s, utcnow())
        rows = (
            await session.execute(
                select(BatchLine.prefix_key, BatchLine.line_no).where(BatchLine.job_id == job_id)
            )
        ).all()
    assert claim is not None
    sender = RecordingSender()

    await JobRun(claim, services.sessions, msgspec.structs.replace(JOBS, concurrency=3), sender).run()

    assert sender.started == [line_no for _, line_no in sorted(rows)]
    assert len({prefix for prefix, _ in rows}) == 4
    assert sender.most_in_flight == 3
    assert (await job_row(services.sessions, job_id)).status == "completed"


@pytest.fixture
def replicas() -> Iterator[tuple[RunningUpstream, RunningUpstream]]:
    with start_mock_upstream() as first, start_mock_upstream() as second:
        yield first, second


async def run_to_completed(services: Services, job_id: str) -> None:
    runner = JobRunner(services)
    task = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(30):
            while (await job_row(services.sessions, job_id)).status != "completed":
                await asyncio.sleep(0.02)
    finally:
        await runner.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def chat_requests(upstream: RunningUpstream) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests() if r["path"].endswith("/chat/completions")]


async def test_lines_sharing_a_system_prompt_carry_one_cache_key_and_meet_one_replica(
    make_services: ServicesFactory, owner: Owner, replicas: tuple[RunningUpstream, RunningUpstream]
) -> None:
    vllm = provider(
        "vllm",
        region="eu",
        base_urls=tuple(f"{upstream.base_url}/v1" for upstream in replicas),
        cache_hints="openai",  # the key reaches the upstream as prompt_cache_key, where it shows
    )
    services = make_services(catalog_with(vllm, msgspec.structs.replace(JOBS, concurrency=4)))
    bodies = [chat_body(n, system=SYSTEMS[n % 4]) for n in range(32)]
    bodies.append(chat_body(32, system=SYSTEMS[0], prompt_cache_key="the-clients-own"))
    job_id = await add_job(services.sessions, owner, bodies)

    await run_to_completed(services, job_id)

    keys: dict[str, set[str | None]] = defaultdict(set)
    homes: dict[str, set[int]] = defaultdict(set)
    for index, upstream in enumerate(replicas):
        for body in chat_requests(upstream):
            system = body["messages"][0]["content"]
            if body["messages"][1]["content"] == "question 32":
                assert body["prompt_cache_key"] == "the-clients-own"
                continue
            keys[system].add(body.get("prompt_cache_key"))
            homes[system].add(index)
    assert set(keys) == set(SYSTEMS)
    assert all(len(found) == 1 for found in homes.values())  # each prompt met one replica
    assert all(len(found) == 1 for found in keys.values())  # one key per system prompt
    assert len(set.union(*keys.values())) == len(SYSTEMS)  # and a different one for each
