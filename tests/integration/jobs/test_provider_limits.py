"""Jobs run on the provider's own batch API (`batch_execution: provider`) inside their key's limits,
against the mock upstream's OpenAI batch API over real HTTP: a round is admitted against the
budgets before it is submitted, its lines settle the spend counters as they are metered, and a key
revoked or expired, or a team deleted, mid-job cancels the provider batch and ends the job with
what it finished."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from sqlalchemy import update

from gateway.db.models import Team
from gateway.db.teams import utcnow
from gateway.errors import QuotaExceeded, RateLimited
from gateway.jobs import ledger
from gateway.jobs.line_sender import estimated_prompt
from gateway.jobs.runner import DEFAULT_MAX_MESSAGES, JobRunner
from gateway.limits import Reservation
from gateway.limits.spend import to_units
from gateway.services import Services
from gateway.settings import Price
from tests.integration.jobs.conftest import (
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
    job_row,
)
from tests.integration.jobs.test_job_limits import STOPS
from tests.integration.jobs.test_runner_postgres import (
    FINAL,
    assert_one_line_per_custom_id,
    eventually,
    file_lines,
    run_to_end,
    running,
    status_is,
    usage_records,
)
from tests.support.catalogs import provider
from tests.support.upstream import RunningUpstream, start_mock_upstream
from tests.unit.auth.records import add_key, add_team

pytestmark = pytest.mark.integration
# USD per million tokens, normal and batch: a line allowing 1,000 output tokens reserves ~$0.001
PRICE = Price(input=Decimal(2), output=Decimal(2), batch_input=Decimal(1), batch_output=Decimal(1))


@pytest.fixture
def upstream() -> Iterator[RunningUpstream]:
    with start_mock_upstream(completion_tokens=8) as running_upstream:
        yield running_upstream


def provider_catalog(upstream: RunningUpstream) -> Any:
    up = provider(
        "up-openai",
        region="eu",
        base_url=f"{upstream.base_url}/v1",
        api_key="upstream-secret",
        batch_execution="provider",
    )
    return catalog_with(up, price=PRICE)


async def new_owner(services: Services, **limits: object) -> Owner:
    team = await add_team(services.sessions, name=f"provider-limits-{time.monotonic_ns()}", **limits)
    key, _ = await add_key(services.sessions, team.id)
    return Owner(team.id, key.id)


def submitted(upstream: RunningUpstream) -> list[dict[str, Any]]:
    return [r for r in upstream.requests() if r["method"] == "POST" and r["path"] == "/v1/batches"]


async def team_spend(services: Services, team_id: str) -> Decimal:
    return await services.limiter.spent_usd("team", team_id, utcnow().strftime("%Y-%m"))


async def test_a_job_over_its_teams_budget_is_never_submitted_and_fails_with_insufficient_quota(
    make_services: ServicesFactory, upstream: RunningUpstream
) -> None:
    services = make_services(provider_catalog(upstream))
    budget = Decimal("0.001")  # the job's 5 lines reserve ~$0.005 at the batch price
    owner = await new_owner(services, monthly_budget_usd=budget)
    job_id = await add_job(services.sessions, owner, [chat_body(n, max_tokens=1000) for n in range(5)])

    job = await run_to_end(services, job_id)

    print(f"\nbudget {budget} USD: status {job.status}, {len(submitted(upstream))} provider batches")
    assert job.status == "failed" and job.failed_at is not None
    assert [error["code"] for error in job.errors or []] == ["insufficient_quota"]
    assert submitted(upstream) == [] and upstream.stats()["total"] == 0  # nothing reached it
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id([], errors, 5)
    assert {line["error"]["code"] for line in errors} == {"insufficient_quota"}
    assert await usage_records(services.sessions, job_id) == []
    assert await team_spend(services, owner.team_id) == 0


async def test_each_metered_line_settles_the_teams_spend_and_the_rest_of_the_reservation_goes_back(
    make_services: ServicesFactory, upstream: RunningUpstream
) -> None:
    services = make_services(provider_catalog(upstream))
    budget = Decimal("0.05")  # the job reserves ~$0.006; it spends a few millionths of that
    owner = await new_owner(services, monthly_budget_usd=budget)
    job_id = await add_job(services.sessions, owner, [chat_body(n, max_tokens=1000) for n in range(6)])

    job = await run_to_end(services, job_id)

    records = await usage_records(services.sessions, job_id)
    spend = sum((r.cost for r in records), Decimal(0))
    print(
        f"\n6 lines on the provider's batch API: spend {spend} USD, the team's counter {await team_spend(services, owner.team_id)} USD"
    )
    assert (job.status, job.request_completed, len(submitted(upstream))) == ("completed", 6, 1)
    assert len(records) == 6 and spend > 0
    # the counter holds what the records cost without a restart's reconcile
    assert await team_spend(services, owner.team_id) == spend
    # and nothing of the job's reservation is still held: all that is left of the budget fits
    async with services.sessions() as session:
        principal = (await ledger.key_standing(session, owner.key_id, time.time())).principal
    assert principal is not None
    await services.limiter.admit(principal, Reservation(units=to_units(budget - spend)))


async def test_a_provider_batch_outliving_a_holds_lifetime_still_holds_its_reservation(
    make_services: ServicesFactory, upstream: RunningUpstream
) -> None:
    """Holds last 2 s here; the provider's batch runs 6 s. At 4 s the job's reservation (~$0.006 of
    the team's $0.01) is still held: a request reserving $0.005 does not fit beside it."""
    upstream.set_behaviour(completion_tokens=8, batch_delay_ms=6_000)
    catalog = provider_catalog(upstream)
    catalog = msgspec.structs.replace(
        catalog, limits=msgspec.structs.replace(catalog.limits, reservation_ttl_s=2.0)
    )
    services = make_services(catalog)
    owner = await new_owner(services, monthly_budget_usd=Decimal("0.01"))
    job_id = await add_job(services.sessions, owner, [chat_body(n, max_tokens=1000) for n in range(6)])

    async def provider_batch_submitted() -> bool:
        return (await job_row(services.sessions, job_id)).provider_batch_id is not None

    async with running(JobRunner(services)):
        await eventually(provider_batch_submitted)
        await asyncio.sleep(4.0)  # twice a hold's lifetime
        async with services.sessions() as session:
            principal = (await ledger.key_standing(session, owner.key_id, time.time())).principal
        assert principal is not None
        with pytest.raises(RateLimited) as refused:
            await services.limiter.admit(principal, Reservation(units=to_units(Decimal("0.005"))))
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    print(f"\na request beside a 6 s provider batch, holds of 2 s: {refused.value.message}")
    assert not isinstance(refused.value, QuotaExceeded)  # held by the job, not spent
    assert (job.status, job.request_completed) == ("completed", 6)


async def test_a_budget_lowered_while_the_job_runs_binds_its_next_round(
    make_services: ServicesFactory, upstream: RunningUpstream
) -> None:
    services = make_services(provider_catalog(upstream))
    owner = await new_owner(services, monthly_budget_usd=Decimal(1))
    failing = {"fail_rate": 1, "fail_status": 500}  # the provider fails it: it goes in every round
    bodies = [chat_body(0, max_tokens=100), chat_body(1, max_tokens=100, mock=failing)]
    job_id = await add_job(services.sessions, owner, bodies)

    async def rounds_at_least(count: int) -> bool:
        return len(submitted(upstream)) >= count

    async with running(JobRunner(services)):
        await eventually(lambda: rounds_at_least(2))
        async with services.sessions.begin() as session:
            lowered = (
                update(Team).where(Team.id == owner.team_id).values(monthly_budget_usd=Decimal("0.000001"))
            )
            await session.execute(lowered)
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    print(f"\nthe budget lowered mid-job: {len(submitted(upstream))} rounds, then {job.status}")
    assert job.status == "failed" and [e["code"] for e in job.errors or []] == ["insufficient_quota"]
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert [line["custom_id"] for line in output] == ["req-0"]
    assert [(line["custom_id"], line["error"]["code"]) for line in errors] == [
        ("req-1", "insufficient_quota")
    ]


@pytest.mark.parametrize("reason", list(STOPS))
async def test_a_stopped_key_cancels_the_provider_batch_and_meters_the_lines_it_finished(
    make_services: ServicesFactory, upstream: RunningUpstream, reason: str
) -> None:
    upstream.set_behaviour(completion_tokens=8, batch_delay_ms=6_000)  # 20 lines, one each 0.3 s
    services = make_services(provider_catalog(upstream))
    owner = await new_owner(services, monthly_budget_usd=Decimal(1))
    job_id = await add_job(services.sessions, owner, [chat_body(n, max_tokens=100) for n in range(20)])

    async def provider_batch_submitted() -> bool:
        return (await job_row(services.sessions, job_id)).provider_batch_id is not None

    async with running(JobRunner(services)):
        await eventually(provider_batch_submitted)
        provider_batch = (await job_row(services.sessions, job_id)).provider_batch_id
        await asyncio.sleep(2.0)  # about a third of its lines finish meanwhile, on the mock's clock
        async with services.sessions.begin() as session:
            table, column = STOPS[reason]
            row_id = owner.team_id if table is Team else owner.key_id
            await session.execute(update(table).where(table.id == row_id).values({column: utcnow()}))
        revoked_at = time.monotonic()
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
        stopped_in = time.monotonic() - revoked_at
    job = await job_row(services.sessions, job_id)

    cancels = [r for r in upstream.requests() if r["path"] == f"/v1/batches/{provider_batch}/cancel"]
    records = await usage_records(services.sessions, job_id)
    print(
        f"\n{reason}: the provider batch cancelled, {len(records)} of 20 lines ran, job ended in {stopped_in:.1f} s"
    )
    assert job.status == "failed" and [e["code"] for e in job.errors or []] == [reason]
    assert len(cancels) == 1 and len(submitted(upstream)) == 1
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 20)
    assert 0 < len(output) == len(records) == job.request_completed < 20
    assert {line["error"]["code"] for line in errors} == {reason}
    # the finished lines were metered and settled: the counter holds what their records cost
    assert await team_spend(services, owner.team_id) == sum((r.cost for r in records), Decimal(0)) > 0


async def test_a_result_without_usage_is_estimated_with_its_prompt(
    make_services: ServicesFactory, upstream: RunningUpstream
) -> None:
    services = make_services(provider_catalog(upstream))
    owner = await new_owner(services)
    long_question = "a question of some length " * 40
    bodies = [chat_body(0, system=long_question, mock={"omit_usage": True})]

    job = await run_to_end(services, await add_job(services.sessions, owner, bodies))

    (record,) = await usage_records(services.sessions, job.id)
    expected = estimated_prompt(json.dumps(bodies[0]), DEFAULT_MAX_MESSAGES)
    print(f"\na result without usage: prompt {record.prompt_tokens} tokens (estimated {expected})")
    assert job.status == "completed" and record.usage_source == "estimated"
    assert record.prompt_tokens == expected > 100
    assert record.completion_tokens > 0
