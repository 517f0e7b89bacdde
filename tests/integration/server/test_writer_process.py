"""The metering writer process on real PostgreSQL and Redis: it writes the stream, drains on stop,
and stops when the `gateway serve` that started it is gone."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.models import UsageRecord
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.server import writer_process
from gateway.server.gc_tuning import (
    MIDDLE_COLLECTIONS_PER_OLD,
    YOUNG_ALLOCATIONS,
    YOUNG_COLLECTIONS_PER_MIDDLE,
)
from gateway.server.writer_process import run_writer
from gateway.settings import load_settings
from tests.integration.metering.conftest import REDIS_URL, pg_url
from tests.unit.metering.conftest import EventFactory

REPO = Path(__file__).resolve().parents[3]


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


# `gateway metering-writer` in a fresh interpreter, stopped by SIGTERM after a moment, then a report
# of its garbage collector; or `run_writer` as tests call it.
_WRITER_AND_REPORT = """
import asyncio, gc, json, os, signal, sys, threading
import gateway.cli
from gateway.server.writer_process import run_writer
from gateway.settings import load_settings

if sys.argv[1] == "cli":
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    gateway.cli.main(["metering-writer"])
else:
    stop = asyncio.Event()
    async def briefly():
        asyncio.get_running_loop().call_later(0.5, stop.set)
        await run_writer(load_settings(), stop=stop)
    asyncio.run(briefly())
print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def _writer_report(how: str) -> dict[str, object]:
    env = os.environ | {
        "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
        "GATEWAY_DATABASE_URL": pg_url("gateway_test_metering"),
        "GATEWAY_REDIS_URL": REDIS_URL,
    }
    out = subprocess.run(
        [sys.executable, "-c", _WRITER_AND_REPORT, how], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=60, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def test_the_writer_process_freezes_start_up_objects_and_collects_less_often() -> None:
    report = _writer_report("cli")
    assert report["threshold"] == [
        YOUNG_ALLOCATIONS,
        YOUNG_COLLECTIONS_PER_MIDDLE,
        MIDDLE_COLLECTIONS_PER_OLD,
    ]
    frozen = report["frozen"]
    assert isinstance(frozen, int) and frozen > 10_000  # the imports and the start-up, at least


def test_a_writer_run_in_a_test_leaves_the_collector_alone() -> None:
    assert _writer_report("function") == {"threshold": [700, 10, 10], "frozen": 0}
