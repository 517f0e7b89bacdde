"""The fault benchmark of metering and limits: what a misbehaving upstream, a crowd of concurrent
requests and an emptied Redis do to the records, the spend and the requests admitted.

Each scenario runs on a gateway of its own (private PostgreSQL and Redis, tests/faults) in front of
a scripted upstream that reports whatever usage a request asks for. The session prints one table:

    scenario | requests | admitted | refused | answered 500 | records written | spend | limit

and each scenario asserts the targets: every other record written, overshoot at most one
request's estimate, no request answered 500.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import pytest
import redis

from tests.faults.conftest import FaultStack, StackFactory
from tests.support.gateway import create_team
from tests.support.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.faults

# The fault stack's price (tests/faults/conftest.py): USD per million tokens.
INPUT, OUTPUT = Decimal("0.50"), Decimal("1.50")
BODY = {"model": "chat", "messages": [{"role": "user", "content": "count the apples"}], "max_tokens": 8}
USAGE = {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}  # the scripted default
REQUEST_COST = (USAGE["prompt_tokens"] * INPUT + USAGE["completion_tokens"] * OUTPUT) / 1_000_000
WRITE_TIMEOUT_S = 20.0


@dataclass
class Row:
    scenario: str
    requests: int
    admitted: int
    refused: int
    failed: int  # answered 500 (or no answer at all)
    records: int
    spend: Decimal
    limit: str


ROWS: list[Row] = []


@pytest.fixture(scope="module", autouse=True)
def table(request: pytest.FixtureRequest) -> Iterator[None]:
    """The table of every scenario that ran, on the terminal after the module's tests."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if ROWS and reporter is not None:
        lines = ["", "| scenario | requests | admitted | refused | 500 | records | spend USD | limit |"]
        lines += ["|---|---:|---:|---:|---:|---:|---:|---|"]
        lines += [
            f"| {r.scenario} | {r.requests} | {r.admitted} | {r.refused} | {r.failed} | {r.records} "
            f"| {r.spend:.7f} | {r.limit} |"
            for r in ROWS
        ]
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled():
            for line in lines:
                reporter.write_line(line)


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as scripted:
        yield scripted


async def send(stack: FaultStack, key: str, bodies: list[dict[str, Any]], *, concurrent: bool) -> list[int]:
    """The status of each request (0: no answer), all at once or one after the other."""
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=stack.urls[0], headers=headers, timeout=30) as client:

        async def one(body: dict[str, Any]) -> int:
            try:
                return (await client.post("/v1/chat/completions", json=body)).status_code
            except httpx.HTTPError:
                return 0

        if concurrent:
            return list(await asyncio.gather(*(one(body) for body in bodies)))
        return [await one(body) for body in bodies]


async def written(stack: FaultStack, team_id: str, expected: int) -> tuple[int, Decimal]:
    """(records, their total cost) of the team once `expected` records are in, or at the timeout."""
    deadline = time.monotonic() + WRITE_TIMEOUT_S
    while True:
        conn = await asyncpg.connect(stack.database_url, timeout=5)
        try:
            row = await conn.fetchrow(
                "SELECT count(*) AS n, coalesce(sum(cost), 0) AS cost FROM usage_records WHERE team_id = $1",
                team_id,
            )
        finally:
            await conn.close()
        assert row is not None
        if row["n"] >= expected or time.monotonic() > deadline:
            return int(row["n"]), Decimal(row["cost"])
        await asyncio.sleep(0.2)


def team(stack: FaultStack, name: str, **limits: object) -> tuple[str, str]:
    with stack.admin() as admin:
        created = create_team(admin, name, **limits)
    return created.id, created.key


def tally(scenario: str, statuses: list[int], records: int, spend: Decimal, limit: str) -> Row:
    row = Row(
        scenario,
        len(statuses),
        admitted=statuses.count(200),
        refused=statuses.count(429),
        failed=sum(1 for s in statuses if s == 0 or s >= 500),
        records=records,
        spend=spend,
        limit=limit,
    )
    ROWS.append(row)
    return row


@pytest.mark.parametrize(
    ("scenario", "usage"),
    [
        (
            "absurd count",
            {"prompt_tokens": 3_000_000_000, "completion_tokens": 8, "total_tokens": 3_000_000_008},
        ),
        ("negative count", {"prompt_tokens": -50, "completion_tokens": -3, "total_tokens": -53}),
    ],
)
async def test_a_poisoned_count_stops_no_other_record(
    fault_stack: StackFactory, upstream: ScriptedUpstream, scenario: str, usage: dict[str, int]
) -> None:
    stack = fault_stack(gateways=1, upstream_url=upstream.base_url)
    team_id, key = team(stack, scenario.replace(" ", "-"), monthly_budget_usd="100")
    bodies = [dict(BODY) for _ in range(20)]
    bodies[4]["scripted_usage"] = usage  # the fifth request's upstream misbehaves
    statuses = await send(stack, key, bodies, concurrent=False)
    statuses += await send(stack, key, [dict(BODY) for _ in range(10)], concurrent=False)  # and after it
    records, spend = await written(stack, team_id, statuses.count(200))
    row = tally(scenario, statuses, records, spend, "budget $100")
    assert row.failed == 0
    assert row.admitted == len(statuses)
    assert records >= row.admitted - 1  # every record but the poisoned one's, at the very least
    assert spend >= 0


async def test_a_budget_for_ten_admits_about_ten_of_two_hundred_at_once(
    fault_stack: StackFactory, upstream: ScriptedUpstream
) -> None:
    stack = fault_stack(gateways=1, upstream_url=upstream.base_url)
    budget = REQUEST_COST * 10
    team_id, key = team(stack, "budget-crowd", monthly_budget_usd=str(budget))
    statuses = await send(stack, key, [dict(BODY) for _ in range(200)], concurrent=True)
    records, spend = await written(stack, team_id, statuses.count(200))
    row = tally("200 at once, budget for 10", statuses, records, spend, f"budget ${budget}")
    assert row.failed == 0
    assert records == row.admitted
    assert row.admitted <= 11  # overshoot at most one request
    assert spend <= budget + REQUEST_COST


async def test_a_token_limit_for_ten_admits_about_ten_of_two_hundred_at_once(
    fault_stack: StackFactory, upstream: ScriptedUpstream
) -> None:
    stack = fault_stack(gateways=1, upstream_url=upstream.base_url)
    tpm = 10 * (USAGE["prompt_tokens"] + BODY["max_tokens"])  # type: ignore[operator]
    team_id, key = team(stack, "tpm-crowd", tpm_limit=tpm)
    statuses = await send(stack, key, [dict(BODY) for _ in range(200)], concurrent=True)
    records, spend = await written(stack, team_id, statuses.count(200))
    row = tally("200 at once, tpm for 10", statuses, records, spend, f"tpm {tpm}")
    assert row.failed == 0
    assert records == row.admitted
    assert row.admitted <= 11


async def test_a_budget_holds_when_redis_comes_back_empty(
    fault_stack: StackFactory, upstream: ScriptedUpstream
) -> None:
    stack = fault_stack(gateways=1, upstream_url=upstream.base_url)
    budget = REQUEST_COST * 10
    team_id, key = team(stack, "budget-redis-emptied", monthly_budget_usd=str(budget))
    before = await send(stack, key, [dict(BODY) for _ in range(12)], concurrent=False)
    await written(stack, team_id, before.count(200))
    assert stack.redis_url is not None
    client = redis.Redis.from_url(stack.redis_url)
    try:
        client.flushdb()  # the spend counters are gone, as after a restart of a Redis that keeps nothing
    finally:
        client.close()
    after = await send(stack, key, [dict(BODY) for _ in range(20)], concurrent=False)
    records, spend = await written(stack, team_id, before.count(200) + after.count(200))
    row = tally("Redis emptied, budget for 10", before + after, records, spend, f"budget ${budget}")
    assert row.failed == 0
    assert row.admitted <= 11
    assert spend <= budget + REQUEST_COST
