"""Fixtures for limiter integration tests: real Redis (the area's db, flushed) and a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.support.stores import redis_url
from tests.unit.metering.conftest import make_event  # noqa: F401  (shared fixture)

REDIS_URL = redis_url("limits")
DATABASE = "gateway_test_limits"


@pytest.fixture
async def redis_pair() -> AsyncIterator[tuple[Redis, Redis]]:
    """Two clients (two connection pools), as two gateway processes would hold.

    Blocking pools: redis-py's default pool raises MaxConnectionsError past 100 commands in flight,
    which the limiter could not tell from an outage.
    """
    first, second = (
        Redis(connection_pool=BlockingConnectionPool.from_url(REDIS_URL, max_connections=20)) for _ in "12"
    )
    await first.flushdb()
    yield first, second
    await first.flushdb()
    await first.aclose()
    await second.aclose()


@pytest.fixture
async def pg_sessions() -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    await create_database(DATABASE)
    await upgrade_head_async(pg_url(DATABASE))
    engine = create_engine(pg_url(DATABASE))
    yield session_factory(engine)
    await engine.dispose()
    await drop_database(DATABASE)
