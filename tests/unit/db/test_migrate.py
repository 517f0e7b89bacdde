"""The migrations build exactly the tables gateway/db/models.py declares (SQLite here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

import gateway.db.models  # noqa: F401  (registers the tables)
from gateway.db.base import Base
from gateway.db.migrate import alembic_config, migrations_dir, upgrade_head, upgrade_head_async
from gateway.db.session import create_engine

HEAD = "0002"  # the newest revision under migrations/versions


def schema_diffs(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def inspect_database(url: str) -> tuple[list[object], set[str], str | None]:
    engine = create_engine(url)
    async with engine.connect() as connection:
        diffs = await connection.run_sync(schema_diffs)
        tables = set(await connection.run_sync(lambda sync: inspect(sync).get_table_names()))
        version = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    await engine.dispose()
    return diffs, tables, version


def test_migrations_folder_is_found_from_the_package() -> None:
    assert (migrations_dir() / "env.py").is_file()
    heads = ScriptDirectory.from_config(alembic_config("sqlite:///unused.db")).get_heads()
    assert heads == [HEAD]


async def test_fresh_sqlite_database_matches_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'gateway.db'}"

    await upgrade_head_async(url)
    diffs, tables, version = await inspect_database(url)

    assert diffs == []
    assert {"teams", "api_keys", "usage_records", "usage_dead_letters", "alembic_version"} <= tables
    assert version == HEAD


async def test_upgrading_twice_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)

    await asyncio.to_thread(upgrade_head, url)  # the synchronous entry point, as the CLI calls it

    diffs, _, version = await inspect_database(url)
    assert (diffs, version) == ([], HEAD)
