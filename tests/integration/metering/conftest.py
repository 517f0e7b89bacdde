"""Fixtures for metering integration tests: fresh PostgreSQL databases, real Redis streams."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence

import pytest
from redis.asyncio import Redis
from sqlalchemy import Column, MetaData, Table, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageRecord
from gateway.db.session import async_url, create_engine
from gateway.metering.events import UsageEvent
from gateway.metering.storage.writer import record_row
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url, redis_url
from tests.unit.metering.conftest import make_event  # noqa: F401  (shared fixture)

REDIS_URL = redis_url("metering")


def pg_url(database: str) -> str:
    return postgres_url(database)


async def drop_database(name: str) -> None:
    await _on_server(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def create_database(name: str) -> None:
    await drop_database(name)
    await _on_server(f'CREATE DATABASE "{name}"')


async def _on_server(statement: str) -> None:
    engine = create_async_engine(async_url(POSTGRES_ADMIN_URL))
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text(statement))
    await engine.dispose()


async def fresh_pg_engine(database: str = "gateway_test_metering") -> AsyncEngine:
    """An engine on a just-created, migrated database (dispose it when done)."""
    await create_database(database)
    await upgrade_head_async(pg_url(database))
    return create_engine(pg_url(database))


async def write_before_tiers(
    sessions: async_sessionmaker[AsyncSession], events: Sequence[UsageEvent]
) -> None:
    """The events' records as a gateway from before migration 0013 wrote them, into a database
    migrated to before it: no `service_tier` column; a record already there is skipped."""
    records = UsageRecord.__table__
    older = Table(
        "usage_records", MetaData(), *(Column(c.name, c.type) for c in records.c if c.name != "service_tier")
    )
    rows = [{k: v for k, v in record_row(event).items() if k != "service_tier"} for event in events]
    async with sessions.begin() as session:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert(older) if dialect == "postgresql" else sqlite.insert(older)
        await session.execute(insert.on_conflict_do_nothing(), rows)


@pytest.fixture
async def pg_engine() -> AsyncIterator[AsyncEngine]:
    engine = await fresh_pg_engine()
    yield engine
    await engine.dispose()
    await drop_database("gateway_test_metering")


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def stream(redis: Redis) -> AsyncIterator[str]:
    name = f"gateway_test_metering:usage:{uuid.uuid4().hex}"
    yield name
    await redis.delete(name)
