"""A job's lines are bound by its key's and team's limits, as any request is: a spent budget fails
the lines past it with `insufficient_quota`, a full rate window paces the job (no line fails for
it), and a key revoked or expired, or a team deleted, stops the job with what it finished."""

from __future__ import annotations

import time
from decimal import Decimal

import msgspec
import pytest
from sqlalchemy import update

from gateway.db.models import ApiKey, Team
from gateway.db.teams import utcnow
from gateway.errors import RateLimited
from gateway.jobs import ledger
from gateway.jobs.runner import JobRunner
from gateway.limits import Reservation
from gateway.services import Services
from gateway.settings import Price
from tests.integration.jobs.conftest import (
    JOBS,
    MOCK,
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
    job_row,
)
from tests.integration.jobs.test_runner_postgres import (
    FINAL,
    assert_one_line_per_custom_id,
    eventually,
    file_lines,
    finished_lines_at_least,
    run_to_end,
    running,
    status_is,
    usage_records,
)
from tests.unit.auth.records import add_key, add_team

pytestmark = pytest.mark.integration
PRICE = Price(input=Decimal(1), output=Decimal(2))  # USD per million tokens: a line costs ~50e-6 USD


async def new_owner(services: Services, **limits: object) -> Owner:
    team = await add_team(services.sessions, name=f"limits-{time.monotonic_ns()}", **limits)
    key, _ = await add_key(services.sessions, team.id)
    return Owner(team.id, key.id)


async def test_lines_past_the_teams_budget_fail_with_insufficient_quota_and_spend_stays_within_it(
    make_services: ServicesFactory,
) -> None:
    services = make_services(catalog_with(MOCK, msgspec.structs.replace(JOBS, concurrency=4), PRICE))
    budget = Decimal("0.0005")  # about ten lines
    owner = await new_owner(services, monthly_budget_usd=budget)
    job_id = await add_job(services.sessions, owner, [chat_body(n, max_tokens=16) for n in range(40)])

    job = await run_to_end(services, job_id)

    records = await usage_records(services.sessions, job_id)
    spend = sum((r.cost for r in records), Decimal(0))
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    print(f"\nbudget {budget} USD: {len(output)} lines ran, {len(errors)} refused, spend {spend} USD")
    assert job.status == "completed"
    assert_one_line_per_custom_id(output, errors, 40)
    assert 0 < len(output) == len(records) < 40 and spend <= budget
    for line in errors:
        assert line["response"]["status_code"] == 429
        assert line["response"]["body"]["error"]["code"] == "insufficient_quota"
    # settled as any request is: the team's counter holds what its records cost
    assert await services.limiter.spent_usd("team", owner.team_id, utcnow().strftime("%Y-%m")) == spend


async def test_a_full_rate_window_paces_the_job_and_fails_no_line(make_services: ServicesFactory) -> None:
    services = make_services(catalog_with(MOCK, msgspec.structs.replace(JOBS, concurrency=8)))
    team = await add_team(services.sessions, name=f"paced-{time.monotonic_ns()}")
    key, _ = await add_key(services.sessions, team.id, rpm_limit=30)  # 30 at once, then one every 2 s
    owner = Owner(team.id, key.id)
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(33)])

    started = time.monotonic()
    job = await run_to_end(services, job_id)
    print(f"\nrpm 30: 33 lines in {time.monotonic() - started:.1f} s")

    assert (job.status, job.request_completed, job.request_failed) == ("completed", 33, 0)
    assert len(await usage_records(services.sessions, job_id)) == 33
    # the lines were counted in the key's window: a request now finds it full
    async with services.sessions() as session:
        principal = (await ledger.key_standing(session, key.id, time.time())).principal
    assert principal is not None
    with pytest.raises(RateLimited):
        await services.limiter.admit(principal, Reservation())


STOPS = {
    "api_key_revoked": (ApiKey, "revoked_at"),
    "api_key_expired": (ApiKey, "expires_at"),
    "team_deleted": (Team, "deleted_at"),
}


@pytest.mark.parametrize("reason", list(STOPS))
async def test_a_revoked_or_expired_key_or_a_deleted_team_stops_its_job_with_what_it_finished(
    make_services: ServicesFactory, reason: str
) -> None:
    services = make_services(catalog_with(MOCK, msgspec.structs.replace(JOBS, concurrency=4)))
    slow = {"latency_ms": 20}
    owner = await new_owner(services)
    job_id = await add_job(services.sessions, owner, [chat_body(n, mock=slow) for n in range(300)])
    table, column = STOPS[reason]
    row_id = owner.team_id if table is Team else owner.key_id

    async with running(JobRunner(services)):
        await eventually(lambda: finished_lines_at_least(services.sessions, job_id, 8))
        async with services.sessions.begin() as session:
            await session.execute(update(table).where(table.id == row_id).values({column: utcnow()}))
        stopped_at = time.time()
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL))
    job = await job_row(services.sessions, job_id)

    records = await usage_records(services.sessions, job_id)
    after = len([r for r in records if r.created_at.timestamp() > stopped_at])
    print(f"\n{reason}: {job.request_completed} lines ran, {after} started after the stop")
    assert job.status == "failed" and job.failed_at is not None
    assert [error["code"] for error in job.errors or []] == [reason]
    output = await file_lines(services.sessions, owner.team_id, job.output_file_id)
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert_one_line_per_custom_id(output, errors, 300)
    assert 8 <= len(output) == job.request_completed < 300
    assert {line["error"]["code"] for line in errors} == {reason}
    assert len(records) == len(output)  # every line that ran has its record, none other ran


async def test_a_job_whose_key_is_gone_ends_instead_of_being_claimed_for_ever(
    services: Services, owner: Owner
) -> None:
    job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(3)])
    async with services.sessions.begin() as session:
        await session.execute(update(ApiKey).where(ApiKey.id == owner.key_id).values(id="key_gone"))

    job = await run_to_end(services, job_id)

    assert job.status == "failed" and [e["code"] for e in job.errors or []] == ["api_key_not_found"]
    errors = await file_lines(services.sessions, owner.team_id, job.error_file_id)
    assert [line["error"]["code"] for line in errors] == ["api_key_not_found"] * 3
