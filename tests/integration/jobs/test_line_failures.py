"""A line whose send breaks (an error the gateway does not expect, past the upstream or before it)
fails alone after MAX_LINE_FAILURES tries, with its error in the error file; the job goes on, and
every upstream call the line made has its record. The fault is injected at the seam between the
executor and the network: a line the input checks accept, that breaks only when it is sent."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gateway.auth.principal import Principal
from gateway.db.teams import utcnow
from gateway.dispatch.executor import Executor
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.dispatch.upstream import Reply, UpstreamClient
from gateway.jobs import ledger
from gateway.jobs.ledger import LineOutcome, PendingLine
from gateway.jobs.line_sender import BeginRun, LineRun
from gateway.jobs.runner import MAX_LINE_FAILURES, JobRun, JobRunner
from gateway.routing.directives import Directives
from tests.integration.jobs.conftest import (
    JOBS,
    MOCK_CATALOG,
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
    job_row,
)
from tests.integration.jobs.test_runner_postgres import (
    assert_one_line_per_custom_id,
    file_lines,
    run_to_end,
    usage_records,
)
from tests.support.catalogs import provider
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

pytestmark = pytest.mark.integration
POISON = b"poisoned line"


class BreakingUpstream:
    """The network client, except that a request carrying POISON raises RecursionError (an encoder
    past the interpreter's limit): after the upstream answered it (`after`), or before it is sent."""

    def __init__(self, inner: UpstreamClient, *, after: bool) -> None:
        self._inner, self._after = inner, after

    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> Reply:
        if POISON in body and not self._after:
            raise RecursionError("maximum recursion depth exceeded while encoding a JSON object")
        reply = await self._inner.request(
            method, url, headers, body, connect_timeout=connect_timeout, read_timeout=read_timeout
        )
        if POISON in body:
            await reply.aclose()
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")
        return reply

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
def upstream() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture()


def poisoned_job(n: int) -> list[dict[str, Any]]:
    bodies = [chat_body(line) for line in range(n)]
    bodies[3]["messages"][-1]["content"] = POISON.decode()
    return bodies


@pytest.mark.parametrize("after", [True, False], ids=["after-the-upstream", "before-sending"])
async def test_a_line_that_breaks_its_send_fails_alone_and_the_job_completes(
    make_services: ServicesFactory, owner: Owner, upstream: RunningUpstream, after: bool
) -> None:
    vllm = provider("vllm", region="eu", base_url=f"{upstream.base_url}/v1")
    catalog = catalog_with(vllm)
    services = make_services(catalog)
    executor = Executor(catalog, services.health, BreakingUpstream(UpstreamPool(), after=after))
    job_id = await add_job(services.sessions, owner, poisoned_job(40))
    upstream.clear()

    try:
        job = await run_to_end(services, job_id, JobRunner(dataclasses.replace(services, executor=executor)))
    finally:
        await executor.aclose()

    served = upstream.stats()["total"]
    records = await usage_records(services.sessions, job_id)
    print(f"\npoisoned line ({'after' if after else 'before'}): served {served}, records {len(records)}")
    assert (job.status, job.request_completed, job.request_failed) == ("completed", 39, 1)
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 40)
    [error] = errors
    assert error["custom_id"] == "req-3" and error["response"]["status_code"] == 500
    assert error["response"]["body"]["error"]["code"] == "line_failed"
    assert "RecursionError" in error["response"]["body"]["error"]["message"]
    broke = [r for r in records if r.error_code == "line_failed"]
    assert len(broke) == MAX_LINE_FAILURES  # each run its own record, estimated
    assert all(r.usage_source == "estimated" and r.prompt_tokens > 0 for r in broke)
    assert len({r.request_id for r in records}) == len(records)
    if after:  # every upstream call has its record, and no other
        assert served == len(records) == 39 + MAX_LINE_FAILURES
    else:  # the runs that broke before sending are recorded all the same: the gateway cannot tell
        assert served == 39 and len(records) == 39 + MAX_LINE_FAILURES


class UnstorableSender:
    """Answers every line at once, line 3 with a body PostgreSQL refuses to store (a NUL character
    in text): an outcome the ledger cannot write, however often the line runs."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives, begin: BeginRun
    ) -> LineRun:
        self.sent.append(line.line_no)
        body = (
            '{"object": "chat.completion", "note": "\x00"}'
            if line.line_no == 3
            else '{"object": "chat.completion"}'
        )
        request_id = ledger.line_request_id(job_id, line.line_no, line.runs + 1)
        return LineRun(LineOutcome(line.line_no, ledger.SUCCEEDED, 200, body, request_id, 1))

    async def settle(self, principal: Principal, run: LineRun) -> None:
        return None

    async def release(self, principal: Principal, run: LineRun) -> None:
        return None


async def test_an_outcome_the_database_refuses_fails_its_line_alone(
    make_services: ServicesFactory, owner: Owner
) -> None:
    services = make_services(MOCK_CATALOG)
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(20)])
    async with services.sessions() as session:
        claim = await ledger.claim_job(session, "unstorable", JOBS.lease_s, utcnow())
    assert claim is not None
    sender = UnstorableSender()

    async with asyncio.timeout(30):
        await JobRun(claim, services.sessions, JOBS, sender).run()

    job = await job_row(services.sessions, job_id)
    assert (job.status, job.request_completed, job.request_failed) == ("completed", 19, 1)
    assert sender.sent.count(3) == MAX_LINE_FAILURES  # and every other line once: its group stored
    assert all(sender.sent.count(n) == 1 for n in range(20) if n != 3)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert [(e["custom_id"], e["response"]["body"]["error"]["code"]) for e in errors] == [
        ("req-3", "line_failed")
    ]
