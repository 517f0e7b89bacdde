"""Benchmark: usage records per second through RedisStreamBuffer + UsageWriter into PostgreSQL.

    .venv/bin/python bench/metering_writer.py [--events 100000] [--batch-size 1000]

Creates (and afterwards drops) the database `gateway_bench_metering` and a throwaway stream.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from decimal import Decimal

from redis.asyncio import Redis
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent, UsageSource
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.metering.storage.writer import UsageWriter
from gateway.server.gc_tuning import tune_for_serving

SERVER = "postgresql+asyncpg://postgres@127.0.0.1:5432"
DATABASE = "gateway_bench_metering"


def event(n: int) -> UsageEvent:
    return UsageEvent(
        request_id=f"req_{uuid.uuid4().hex}",
        created_at=time.time(),
        team_id=f"team_{n % 10}",
        key_id=f"key_{n % 50}",
        model="gpt-4o",
        provider="openai-us",
        region="us-east",
        deployment="openai-us/gpt-4o",
        upstream_model="gpt-4o-2024-08-06",
        endpoint="chat/completions",
        status=200,
        batch_id=f"batch-{n % 100}",
        prompt_tokens=1200,
        completion_tokens=300,
        cached_tokens=1024,
        usage_source=UsageSource.UPSTREAM,
        cost=Decimal("0.0051"),
        uncached_cost=Decimal("0.0060"),
        latency_ms=812.25,
        ttft_ms=95.5,
    )


async def server(statement: str) -> None:
    engine = create_async_engine(f"{SERVER}/postgres", isolation_level="AUTOCOMMIT")
    async with engine.connect() as connection:
        await connection.execute(text(statement))
    await engine.dispose()


async def main(events: int, batch_size: int, redis_url: str) -> None:
    await server(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    await server(f'CREATE DATABASE "{DATABASE}"')
    await upgrade_head_async(f"{SERVER}/{DATABASE}")
    engine = create_engine(f"{SERVER}/{DATABASE}")
    redis = Redis.from_url(redis_url)
    buffer = RedisStreamBuffer(redis, stream=f"gateway_bench:usage:{uuid.uuid4().hex}")
    writer = UsageWriter(buffer, session_factory(engine), batch_size=batch_size)
    tune_for_serving()  # as `gateway metering-writer` does once it has started
    try:
        started = time.perf_counter()
        for chunk in range(0, events, 50):
            await asyncio.gather(*(buffer.append(event(n)) for n in range(chunk, min(chunk + 50, events))))
        appended = time.perf_counter()
        await writer.flush()
        written = time.perf_counter()
        async with session_factory(engine)() as session:
            stored = await session.scalar(select(func.count()).select_from(UsageRecord))
        print(
            f"appended {events} events in {appended - started:.2f}s ({events / (appended - started):,.0f}/s)"
        )
        print(
            f"wrote {stored} records in {written - appended:.2f}s ({events / (written - appended):,.0f} records/s)"
        )
    finally:
        await redis.delete(buffer.stream)
        await redis.aclose()
        await engine.dispose()
        await server(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.batch_size, arguments.redis_url))
