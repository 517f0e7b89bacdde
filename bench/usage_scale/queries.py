"""The report queries the usage pages and endpoints make, each timed where the gateway runs them:
the report function's call (the query, and decoding its rows), on the loaded database."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.usage_scale.dataset import Tenant
from bench.usage_scale.stack import Sessions
from gateway.metering.reports.batches import team_batches
from gateway.metering.reports.throughput import batch_throughput
from gateway.metering.reports.usage import (
    UsageQuery,
    encode_cursor,
    report_csv,
    usage_events,
    usage_report,
)

Run = Callable[[Sessions], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    run: Run


def last_month(now: datetime) -> tuple[datetime, datetime]:
    """The previous calendar month, in UTC: whole days."""
    first = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first - timedelta(days=1)).replace(day=1), first


def report(query: UsageQuery, *, csv: bool = False) -> Run:
    async def run(sessions: Sessions) -> object:
        async with sessions() as session:
            rows = await usage_report(session, query)
        return report_csv(rows, query.group_by) if csv else rows

    return run


def events(query: UsageQuery, *, after: datetime | None = None, limit: int = 100) -> Run:
    cursor = None if after is None else encode_cursor(after, "")

    async def run(sessions: Sessions) -> object:
        async with sessions() as session:
            return await usage_events(session, query, cursor, limit)

    return run


def batches(team_id: str) -> Run:
    """The console's batches page: a page of the team's batches, then their totals in one report."""

    async def run(sessions: Sessions) -> object:
        async with sessions() as session:
            listed, _ = await team_batches(session, team_id, limit=20, after=None)
            since = min(batch.created_at for batch in listed)
            return await usage_report(session, UsageQuery(start=since, team_id=team_id, group_by=("batch",)))

    return run


def one_batch(team_id: str, batch_id: str) -> Run:
    async def run(sessions: Sessions) -> object:
        async with sessions() as session:
            return await batch_throughput(session, team_id, batch_id, None)

    return run


def queries(tenants: list[Tenant], now: datetime, day_zero: float) -> list[Query]:
    start, end = last_month(now)
    team, key = tenants[3].team_id, tenants[3].key_ids[1]
    everything = ("team", "key", "model", "provider", "region", "batch")
    cut = (now - timedelta(days=30), now)  # cut at both ends: two part days come from the records
    busy_day = datetime.fromtimestamp(day_zero, UTC) + timedelta(days=40)
    batch = f"batch-03-{int(busy_day.timestamp() // 86_400)}-1"
    month = {"start": start, "end": end}
    return [
        Query("month by team, model", report(UsageQuery(**month, group_by=("team", "model")))),
        Query(
            "30 days to now (cut days) by team, model", report(UsageQuery(*cut, group_by=("team", "model")))
        ),
        Query("month by day (the chart)", report(UsageQuery(**month, group_by=("day",)))),
        Query("month by day, team", report(UsageQuery(**month, group_by=("day", "team")))),
        Query(
            "month by day, model; one team",
            report(UsageQuery(**month, group_by=("day", "model"), team_id=team)),
        ),
        Query("month by team..batch (six fields)", report(UsageQuery(**month, group_by=everything))),
        Query("month by six fields, as CSV", report(UsageQuery(**month, group_by=everything), csv=True)),
        Query("month by model; one key", report(UsageQuery(**month, group_by=("model",), key_id=key))),
        Query(
            "month by day; model and provider",
            report(UsageQuery(**month, group_by=("day",), model="gpt-4o", provider="azure-eu")),
        ),
        Query("one batch's totals", report(UsageQuery(team_id=team, batch=batch))),
        Query("all time, no group", report(UsageQuery())),
        Query("all time by team, day", report(UsageQuery(group_by=("team", "day")))),
        Query("events: first page", events(UsageQuery())),
        Query("events: a page mid-way (cursor)", events(UsageQuery(), after=busy_day)),
        Query("events: one team, mid-way", events(UsageQuery(team_id=team), after=busy_day)),
        Query("events: one key, mid-way", events(UsageQuery(key_id=key), after=busy_day)),
        Query("events: one batch", events(UsageQuery(batch=batch))),
        Query("events: one model, last month", events(UsageQuery(**month, model="claude-haiku"), limit=1000)),
        Query("a team's batches page", batches(team)),
        Query("one batch's throughput", one_batch(team, batch)),
    ]


async def timed(run: Run, sessions: Sessions, runs: int) -> list[float]:
    """Milliseconds of each of `runs` calls, after one untimed call (a cold cache is not the case
    being measured: a console's pages are read again and again)."""
    await run(sessions)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await run(sessions)
        times.append((time.perf_counter() - started) * 1000)
    return times
