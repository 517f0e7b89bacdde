"""What reached `usage_records`, how fast, and how deep the metering buffer grew meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

SETTLE_TIMEOUT_S = 30.0  # a bound for the polling below (records are written within ~1 s of a recovery)


async def record_counts(database_url: str, team_id: str) -> tuple[int, int]:
    """(records, distinct request ids) of one team."""
    conn = await asyncpg.connect(database_url, timeout=2)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, count(DISTINCT request_id) AS d FROM usage_records WHERE team_id = $1",
            team_id,
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row["n"]), int(row["d"])


async def records_of(database_url: str, team_id: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(database_url, timeout=2)
    try:
        rows = await conn.fetch("SELECT * FROM usage_records WHERE team_id = $1", team_id)
    finally:
        await conn.close()
    return {row["request_id"]: row for row in rows}


@dataclass
class DrainWatch:
    """Samples of (seconds, records written) while the writers catch up."""

    samples: list[tuple[float, int]] = field(default_factory=list)

    def seconds_until(self, count: int) -> float | None:
        """When the team first had `count` records, counted from the start of the watch."""
        return next((t for t, n in self.samples if n >= count), None)

    def catch_up_rate(self, target: int) -> float | None:
        """Records/s from the last sample before writing resumed to the first with `target` records."""
        done = self.seconds_until(target)
        if not self.samples or done is None:
            return None
        baseline = self.samples[0][1]
        resumed = max((t for t, n in self.samples if n == baseline), default=0.0)
        return (target - baseline) / max(done - resumed, 1e-3)


async def watch_records(database_url: str, team_id: str, stop: asyncio.Event) -> DrainWatch:
    """Count the team's records every 0.1 s until `stop` (the database may still be coming back)."""
    watch = DrainWatch()
    started = time.monotonic()
    while True:
        stopping = stop.is_set()  # one more sample after `stop`, so the last count is seen
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            count, _ = await record_counts(database_url, team_id)
            watch.samples.append((time.monotonic() - started, count))
        if stopping:
            return watch
        await asyncio.sleep(0.1)


async def wait_for_records(
    database_url: str, team_id: str, expected: set[str], timeout_s: float = SETTLE_TIMEOUT_S
) -> dict[str, asyncpg.Record]:
    """Poll until every expected request id has its record (or the bound runs out); return them all."""
    started = time.monotonic()
    while True:
        try:
            count, _ = await record_counts(database_url, team_id)
            if count >= len(expected):
                records = await records_of(database_url, team_id)
                if expected <= records.keys():
                    return records
        except (OSError, asyncpg.PostgresError):
            pass  # the database is still coming back
        if time.monotonic() - started > timeout_s:
            return await records_of(database_url, team_id)
        await asyncio.sleep(0.1)


async def sample_readiness(
    targets: Sequence[str], stop: asyncio.Event, every_s: float = 0.25
) -> list[dict[str, Any]]:
    """GET /readyz on every target until `stop`; each sample is the report plus `target` and `status`."""
    samples: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=5.0) as client:
        while not stop.is_set():
            for target in targets:
                try:
                    response = await client.get(f"{target}/readyz")
                    samples.append(response.json() | {"target": target, "http_status": response.status_code})
                except (httpx.HTTPError, ValueError):
                    samples.append({"target": target, "http_status": None})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
    return samples


def peak_backlog(samples: Sequence[dict[str, Any]]) -> int:
    return max((int(s.get("metering_backlog") or 0) for s in samples), default=0)


def report(record_property: Callable[[str, object], None], scenario: str, figures: dict[str, object]) -> None:
    """Keep a scenario's measured figures in the JUnit report and print them (`pytest -s` shows them)."""
    for name, value in figures.items():
        record_property(f"{scenario}.{name}", value)
    print(f"\nFAULT FIGURES {scenario}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def report_gap(
    record_property: Callable[[str, object], None],
    scenario: str,
    *,
    requests: int,
    served_upstream: int,
    records: int,
    spend: object = None,
    limit: object = None,
) -> int:
    """The exactly-once row every billing scenario prints: what clients sent, what the upstream
    served (the mock's own count), what was recorded, spend against the limit (when one binds),
    and the gap (served upstream without a record, or recorded twice). Returns the gap."""
    gap = served_upstream - records
    report(
        record_property,
        scenario,
        {
            "requests": requests,
            "served_upstream": served_upstream,
            "records": records,
            "spend": spend if spend is not None else "-",
            "limit": limit if limit is not None else "-",
            "gap": gap,
        },
    )
    return gap
