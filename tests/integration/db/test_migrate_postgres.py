"""Migrations on a fresh PostgreSQL database, including gateway processes starting together."""

from __future__ import annotations

import asyncio
import re

import pytest
from alembic import command
from sqlalchemy import Table, text
from sqlalchemy.engine import Connection

from gateway.db.migrate import alembic_config, upgrade_head_async
from gateway.db.session import create_engine
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.unit.db.test_migrate import (
    HEAD,
    JOBS_AT_0004,
    JOBS_AT_0005,
    TEAM_AT_0002,
    job_batches,
    job_directives,
    migrate,
    team_columns,
)
from tests.unit.db.test_migrate import schema_diffs as model_diffs

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_metering_migrate"


def schema_diffs(connection: Connection) -> list[object]:
    """The differences from the models, but for usage_records' partitions (migration 0008), which
    the models do not declare: they are made by the upkeep, month by month."""
    return [diff for diff in model_diffs(connection) if not names_a_partition(diff)]


def names_a_partition(diff: object) -> bool:
    """A table, or an index of one, whose parent table is usage_records."""
    assert isinstance(diff, tuple)
    table = diff[1] if isinstance(diff[1], Table) else getattr(diff[1], "table", None)
    return table is not None and PARTITION.match(table.name) is not None


PARTITION = re.compile(r"^usage_records_(default|\d{4}_\d{2})$")


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
    assert [tuple(row) for row in versions] == [(HEAD,)]


async def test_the_token_columns_widen_under_existing_records() -> None:
    """A database at 0001 with a record in it: after the upgrade the record is there and a count
    past int4 fits beside it."""
    database = "gateway_test_metering_migrate_widen"
    await create_database(database)
    url = pg_url(database)
    engine = create_engine(url)
    columns = "request_id, created_at, team_id, key_id, model, provider, region, deployment, upstream_model, "
    columns += "endpoint, status, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, "
    columns += "usage_source, cost, uncached_cost, latency_ms"
    values = "'{id}', now(), 't', 'k', 'm', 'p', 'r', 'd', 'u', 'chat/completions', 200, {n}, 1, 0, 0, "
    values += "'upstream', 0, 0, 1"

    def upgrade_to_first(connection: Connection) -> None:
        config = alembic_config(url)
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")

    async with engine.begin() as connection:
        await connection.run_sync(upgrade_to_first)
        await connection.execute(
            text(f"INSERT INTO usage_records ({columns}) VALUES ({values.format(id='old', n=7)})")
        )
    await upgrade_head_async(url)
    async with engine.begin() as connection:
        await connection.execute(
            text(f"INSERT INTO usage_records ({columns}) VALUES ({values.format(id='new', n=3_000_000_000)})")
        )
        rows = await connection.execute(text("SELECT request_id, prompt_tokens FROM usage_records"))
        counts = {row[0]: row[1] for row in rows}
        diffs = await connection.run_sync(schema_diffs)
    await engine.dispose()
    await drop_database(database)
    assert counts == {"old": 7, "new": 3_000_000_000}
    assert diffs == []


async def test_teams_at_0002_get_weight_one_and_the_downgrade_drops_it() -> None:
    database = "gateway_test_metering_migrate_weight"
    await create_database(database)
    url = pg_url(database)
    await migrate(url, command.upgrade, "0002")
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(TEAM_AT_0002))

    await upgrade_head_async(url)
    async with engine.connect() as connection:
        upgraded = tuple((await connection.execute(text("SELECT rpm_limit, weight FROM teams"))).one())
        diffs = await connection.run_sync(schema_diffs)

    await migrate(url, command.downgrade, "0002")
    async with engine.connect() as connection:
        columns = await team_columns(connection)
        names = (await connection.execute(text("SELECT name FROM teams"))).scalars().all()
    await engine.dispose()
    await drop_database(database)
    assert upgraded == (60, 1.0)
    assert diffs == []
    assert "weight" not in columns
    assert names == ["old"]


async def test_provider_batch_ids_move_into_their_column_and_back() -> None:
    database = "gateway_test_metering_migrate_provider_batch"
    await create_database(database)
    url = pg_url(database)
    await migrate(url, command.upgrade, "0004")
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(JOBS_AT_0004))

    await upgrade_head_async(url)
    async with engine.connect() as connection:
        upgraded = await job_batches(connection)
        diffs = await connection.run_sync(schema_diffs)
    await migrate(url, command.downgrade, "0004")
    async with engine.connect() as connection:
        downgraded = await job_directives(connection)
    await engine.dispose()
    await drop_database(database)

    assert upgraded == JOBS_AT_0005
    assert diffs == []
    assert downgraded["batch_both"] == {"region": "eu", "provider_batch_id": "pb_1"}
    assert downgraded["batch_alone"] == {"provider_batch_id": "pb_2"}
