"""Batch throughput and the team's batches on real PostgreSQL: aware timestamps, NUMERIC timings,
the union of records and jobs; percentiles checked against PostgreSQL's own `percentile_disc`.

Prints what reading a batch of 100,000 records costs (a figure, not asserted)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import BatchJob, UsageRecord
from gateway.db.session import session_factory
from gateway.metering.reports.batches import team_batches
from gateway.metering.reports.throughput import TimedRecord, batch_throughput, throughput
from tests.integration.metering.conftest import drop_database, fresh_pg_engine

pytestmark = pytest.mark.integration
DATABASE = "gateway_test_throughput"
START = datetime(2026, 3, 1, tzinfo=UTC)
Sessions = async_sessionmaker[AsyncSession]


@pytest.fixture
async def sessions() -> AsyncIterator[Sessions]:
    engine = await fresh_pg_engine(DATABASE)
    yield session_factory(engine)
    await engine.dispose()
    await drop_database(DATABASE)


def records(batch_id: str, count: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for n in range(count):
        ttft = None if n % 10 == 0 else Decimal(rng.randint(5_000, 900_000)) / 1000
        rows.append(
            {
                "request_id": f"req_{uuid.uuid4().hex}",
                "created_at": START + timedelta(milliseconds=n),
                "team_id": "team_a",
                "key_id": "key_a",
                "model": "chat",
                "provider": "vllm",
                "region": "eu",
                "deployment": "vllm/m",
                "upstream_model": "m",
                "endpoint": "chat/completions",
                "batch_id": batch_id,
                "status": 200 if n % 50 else 502,
                "prompt_tokens": rng.choice([100, 3000, 9000, 40000]),
                "completion_tokens": rng.randint(1, 500),
                "cached_tokens": 0,
                "usage_source": "upstream",
                "cost": Decimal(0),
                "latency_ms": (ttft or Decimal(0)) + Decimal(rng.randint(1_000, 9_000_000)) / 1000,
                "ttft_ms": ttft,
                "queue_ms": None if n % 7 == 0 else Decimal(rng.randint(0, 2_000_000)) / 1000,
            }
        )
    return rows


async def postgres_percentiles(session: AsyncSession, batch_id: str) -> list[float]:
    c = UsageRecord.__table__.c
    ordered = c.ttft_ms
    statement = select(*(func.percentile_disc(p).within_group(ordered) for p in (0.5, 0.9, 0.99))).where(
        c.batch_id == batch_id, c.status == 200, c.ttft_ms.is_not(None)
    )
    row = (await session.execute(statement)).one()
    return [float(value) for value in row]


def as_timed(row: dict[str, Any]) -> TimedRecord:
    """A row as inserted, as the throughput reads it (timings as floats, waits included)."""
    ttft, queue = row["ttft_ms"], row["queue_ms"]
    return TimedRecord(
        row["created_at"].timestamp(), row["status"], row["prompt_tokens"], row["cached_tokens"],
        row["completion_tokens"], float(row["latency_ms"]), None if ttft is None else float(ttft),
        None if queue is None else float(queue),
    )  # fmt: skip


async def test_percentiles_agree_with_postgresql_and_timings_are_read_exactly(sessions: Sessions) -> None:
    rows = records("b1", 2_000, random.Random(1))
    async with sessions.begin() as session:
        await session.execute(insert(UsageRecord), rows)

    async with sessions() as session:
        figures = await batch_throughput(session, "team_a", "b1", None)
        expected = await postgres_percentiles(session, "b1")
        totals = (
            await session.execute(
                select(func.count(), func.sum(UsageRecord.completion_tokens)).where(
                    UsageRecord.batch_id == "b1"
                )
            )
        ).one()

    assert figures is not None
    assert [figures.ttft_ms.p50, figures.ttft_ms.p90, figures.ttft_ms.p99] == expected
    from_rows = throughput(as_timed(row) for row in rows)
    assert from_rows is not None
    assert (figures.prefill_tokens_per_s, figures.decode_tokens_per_s) == (
        from_rows.prefill_tokens_per_s,
        from_rows.decode_tokens_per_s,
    )
    assert figures.requests.succeeded + figures.requests.failed == totals[0]
    assert figures.tokens.completion == totals[1]
    assert figures.requests_without_ttft == sum(1 for n in range(2_000) if n % 10 == 0 and n % 50)
    assert {b.prompt_tokens for b in figures.by_prompt_length} == {"0-2k", "2-8k", "8-32k", "32k+"}


async def test_the_team_batches_merge_records_and_jobs(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        await session.execute(insert(UsageRecord), records("batch_job", 3, random.Random(2)))
        await session.execute(insert(UsageRecord), records("live", 2, random.Random(3)))
        session.add(
            BatchJob(id="batch_job", team_id="team_a", key_id="key_a", endpoint="/v1/chat/completions",
                     input_file_id="file-x", completion_window="24h", status="completed",
                     created_at=START - timedelta(hours=1), expires_at=START + timedelta(hours=23))
        )  # fmt: skip

    async with sessions() as session:
        page, more = await team_batches(session, "team_a", limit=1, after=None)
        rest, done = await team_batches(session, "team_a", limit=5, after=page[0].id)

    assert [(b.id, b.requests, b.job_status) for b in page + rest] == [
        ("live", 2, None),
        ("batch_job", 3, "completed"),
    ]
    assert (more, done) == (True, False)
    assert rest[0].created_at == START - timedelta(hours=1)
    assert rest[0].last_used_at == START + timedelta(milliseconds=2)


async def test_reading_a_batch_of_100k_records(
    sessions: Sessions, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = records("big", 100_000, random.Random(4))
    for at in range(0, len(rows), 1_000):
        # a transaction each, as the usage writer commits: the records' daily totals are one row
        # here, which one long transaction would update 100,000 times over
        async with sessions.begin() as session:
            await session.execute(insert(UsageRecord), rows[at : at + 1_000])

    async with sessions() as session:
        started = time.perf_counter()
        figures = await batch_throughput(session, "team_a", "big", None)
        elapsed = time.perf_counter() - started

    assert figures is not None and figures.requests.succeeded + figures.requests.failed == 100_000
    with capsys.disabled():
        print(f"\nthroughput of a 100,000-record batch on PostgreSQL: {elapsed * 1000:.0f} ms")
