"""The metering writer process on real PostgreSQL and Redis: it writes the stream, drains on stop,
and stops when the `gateway serve` that started it is gone."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.models import UsageRecord
from gateway.metering import writer_process
from gateway.metering.redis_buffer import RedisStreamBuffer
from gateway.metering.writer_process import run_writer
from gateway.settings import load_settings
from tests.integration.metering.conftest import pg_url
from tests.unit.metering.conftest import EventFactory

REPO = Path(__file__).resolve().parents[3]
REDIS_URL = "redis://127.0.0.1:6379/11"


async def _records(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(select(func.count()).select_from(UsageRecord))).scalar_one())


async def test_it_writes_what_the_workers_appended_and_drains_on_stop(
    pg_engine: AsyncEngine, make_event: EventFactory
) -> None:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
            "GATEWAY_DATABASE_URL": pg_url("gateway_test_metering"),
            "GATEWAY_REDIS_URL": REDIS_URL,
            "GATEWAY_METERING_WRITER": "external",
        }
    )
    redis = Redis.from_url(REDIS_URL)
    await redis.flushdb()
    workers_side = RedisStreamBuffer(redis)  # what serving workers append to
    stop = asyncio.Event()
    try:
        await asyncio.gather(*(workers_side.append(make_event()) for _ in range(300)))
        writing = asyncio.create_task(run_writer(settings, stop=stop))
        for _ in range(100):
            if await _records(pg_engine) == 300:
                break
            await asyncio.sleep(0.1)
        assert await _records(pg_engine) == 300

        await asyncio.gather(*(workers_side.append(make_event()) for _ in range(50)))
        stop.set()  # at once: what is in the stream now is written before it returns
        await asyncio.wait_for(writing, 20)

        assert await _records(pg_engine) == 350
        consumers = await redis.xinfo_consumers("gateway:usage", "writers")
        assert [int(c["pending"]) for c in consumers] == [0]
    finally:
        await redis.flushdb()
        await redis.aclose()


async def test_it_stops_once_the_process_that_started_it_has_ended() -> None:
    parent = subprocess.Popen(["sleep", "0.3"])
    stop = asyncio.Event()
    try:
        await asyncio.wait_for(writer_process._stop_when_orphaned(parent.pid, stop), 5)
        assert stop.is_set()
    finally:
        parent.wait()


async def test_a_parent_already_gone_stops_it_at_once() -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()  # reaped: the pid names no process any more
    stop = asyncio.Event()
    await asyncio.wait_for(writer_process._stop_when_orphaned(finished.pid, stop), 1)
    assert stop.is_set()
