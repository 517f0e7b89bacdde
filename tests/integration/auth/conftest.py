"""Real PostgreSQL (database gateway_test_auth) and real Redis for the auth integration tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.db.session import create_engine, session_factory
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url, redis_url
from tests.unit.auth.records import create_tables

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_auth"
DATABASE_URL = postgres_url(DATABASE)
REDIS_URL = redis_url("auth")


@pytest.fixture(scope="session")
async def database_url() -> str:
    conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await conn.close()
    return DATABASE_URL


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await create_tables(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return session_factory(engine)


@pytest.fixture
async def redis_clients() -> AsyncIterator[tuple[Redis, Redis]]:
    """Two connections, as two gateway processes would have."""
    first, second = Redis.from_url(REDIS_URL), Redis.from_url(REDIS_URL)
    yield first, second
    await first.aclose()
    await second.aclose()


@pytest.fixture
def channel() -> str:
    """A channel of this test's own, so parallel test runs do not evict each other's keys."""
    return f"gateway-test:keys:invalidate:{uuid.uuid4().hex}"
