"""Migrations on a fresh PostgreSQL database, including gateway processes starting together."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.unit.db.test_migrate import schema_diffs

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_metering_migrate"


async def test_concurrent_upgrades_on_a_fresh_database_agree_with_the_models() -> None:
    await create_database(DATABASE)
    url = pg_url(DATABASE)

    await asyncio.gather(*(upgrade_head_async(url) for _ in range(4)))  # the advisory lock serialises

    engine = create_engine(url)
    async with engine.connect() as connection:
        diffs = await connection.run_sync(schema_diffs)
        versions = (await connection.execute(text("SELECT version_num FROM alembic_version"))).all()
    await engine.dispose()
    await drop_database(DATABASE)
    assert diffs == []
    assert [tuple(row) for row in versions] == [("0001",)]
