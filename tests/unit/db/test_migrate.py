"""The migrations build exactly the tables gateway/db/models.py declares (SQLite here)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, String, column, inspect, select, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

import gateway.db.models  # noqa: F401  (registers the tables)
from gateway.db.base import Base
from gateway.db.migrate import alembic_config, migrations_dir, upgrade_head, upgrade_head_async
from gateway.db.session import create_engine

HEAD = "0015"  # the newest revision under migrations/versions


def schema_diffs(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def migrate(url: str, step: Callable[..., None], revision: str) -> None:
    """`command.upgrade` or `command.downgrade` to `revision`, committed."""
    engine = create_engine(url)

    def run(connection: Connection) -> None:
        config = alembic_config(url)
        config.attributes["connection"] = connection
        step(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)
    await engine.dispose()


TEAM_AT_0002 = (
    "INSERT INTO teams (id, name, rpm_limit, created_at, updated_at) "
    "VALUES ('team_old', 'old', 60, '2026-12-01 00:00:00', '2026-12-01 00:00:00')"
)


JOBS_AT_0004 = (
    "INSERT INTO batch_jobs (id, team_id, key_id, endpoint, input_file_id, completion_window, status, "
    "directives, request_total, request_completed, request_failed, prompt_tokens, completion_tokens, "
    "cached_tokens, created_at, expires_at, fencing_token) VALUES "
    + ", ".join(
        f"('{job_id}', 'team_old', 'key_old', '/v1/chat/completions', 'file-old', '24h', 'in_progress', "
        f"{directives}, 1, 0, 0, 0, 0, 0, '2026-12-01 00:00:00', '2026-12-02 00:00:00', 1)"
        for job_id, directives in (
            ("batch_both", """'{"region": "eu", "provider_batch_id": "pb_1"}'"""),
            ("batch_alone", """'{"provider_batch_id": "pb_2"}'"""),
            ("batch_none", """'{"region": "eu"}'"""),
            ("batch_bare", "NULL"),
        )
    )
)
# the jobs above as 0005 keeps them: (directives, provider_batch_id)
JOBS_AT_0005 = {
    "batch_alone": (None, "pb_2"),
    "batch_bare": (None, None),
    "batch_both": ({"region": "eu"}, "pb_1"),
    "batch_none": ({"region": "eu"}, None),
}
_jobs = table("batch_jobs", column("id", String()), column("directives", JSON()))


async def job_directives(connection: AsyncConnection) -> dict[str, object]:
    rows = await connection.execute(select(_jobs.c.id, _jobs.c.directives))
    return {row.id: row.directives for row in rows}


async def job_batches(connection: AsyncConnection) -> dict[str, tuple[object, str | None]]:
    """Each job's directives and provider batch id, as 0005 keeps them."""
    batch_id = column("provider_batch_id", String())
    rows = await connection.execute(select(_jobs.c.id, _jobs.c.directives, batch_id).select_from(_jobs))
    return {job_id: (directives, provider_batch) for job_id, directives, provider_batch in rows}


async def team_columns(connection: AsyncConnection) -> set[str]:
    return await connection.run_sync(lambda sync: {c["name"] for c in inspect(sync).get_columns("teams")})


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


async def test_teams_of_an_existing_database_get_weight_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await migrate(url, command.upgrade, "0002")
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(TEAM_AT_0002))

    await upgrade_head_async(url)

    async with engine.connect() as connection:
        row = (await connection.execute(text("SELECT rpm_limit, weight FROM teams"))).one()
    diffs, _, version = await inspect_database(url)
    await engine.dispose()
    assert tuple(row) == (60, 1.0)
    assert (diffs, version) == ([], HEAD)


async def test_the_weight_downgrade_drops_the_column_and_keeps_the_teams(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(TEAM_AT_0002))

    await migrate(url, command.downgrade, "0002")

    async with engine.connect() as connection:
        columns = await team_columns(connection)
        names = (await connection.execute(text("SELECT name FROM teams"))).scalars().all()
    await engine.dispose()
    assert "weight" not in columns
    assert {"rpm_limit", "tpm_limit"} <= columns
    assert names == ["old"]


async def test_provider_batch_ids_move_out_of_the_directives_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await migrate(url, command.upgrade, "0004")
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(JOBS_AT_0004))

    await upgrade_head_async(url)
    async with engine.connect() as connection:
        upgraded = await job_batches(connection)
    diffs, _, version = await inspect_database(url)
    await migrate(url, command.downgrade, "0004")
    async with engine.connect() as connection:
        downgraded = await job_directives(connection)
        record_columns = await connection.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("usage_records")}
        )
    await engine.dispose()

    assert upgraded == JOBS_AT_0005
    assert (diffs, version) == ([], HEAD)
    assert downgraded == {
        "batch_both": {"region": "eu", "provider_batch_id": "pb_1"},
        "batch_alone": {"provider_batch_id": "pb_2"},
        "batch_none": {"region": "eu"},
        "batch_bare": None,
    }
    assert "queue_ms" not in record_columns
