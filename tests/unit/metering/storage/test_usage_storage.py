"""The usage tables' storage on SQLite: migration 0007's backfill while a writer inserts, the
upkeep (nothing to do on one plain table), and the settings for partitions, retention and the
read replica."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.metering.storage.upkeep import UsageUpkeep, keep_usage_storage
from gateway.settings import ConfigError, load_settings
from tests.unit.db.test_migrate import migrate
from tests.unit.settings.test_environment import MINIMAL, write

COLUMNS = (
    "request_id, created_at, team_id, key_id, model, provider, region, deployment, upstream_model, "
    "endpoint, status, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, "
    "usage_source, cost, uncached_cost, latency_ms"
)


async def test_the_daily_backfill_counts_each_record_once_while_a_writer_inserts(tmp_path: Path) -> None:
    """Records inserted one by one all through the upgrade to usage_daily: each is counted once,
    by the backfill or by the trigger, and the upgrade does not fail on usage_daily's key."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    await migrate(url, command.upgrade, "0006")
    engine = create_engine(url)
    stop = asyncio.Event()
    written = 0

    async def insert_records() -> None:
        nonlocal written
        while not stop.is_set():
            values = (
                f"'req_{written}', '2026-01-01 00:00:{written % 60:02d}', 't', 'k', 'm', 'p', 'r', 'd', "
                "'u', 'chat/completions', 200, 10, 1, 0, 0, 'upstream', 0.5, 0.5, 1"
            )
            with contextlib.suppress(Exception):  # locked out while the upgrade holds the database
                async with engine.begin() as connection:
                    await connection.execute(text(f"INSERT INTO usage_records ({COLUMNS}) VALUES ({values})"))
                written += 1
            await asyncio.sleep(0)

    inserting = asyncio.create_task(insert_records())
    try:
        while written < 20:
            await asyncio.sleep(0.01)
        await upgrade_head_async(url)
        after = written
        while written < after + 20:  # and the triggers count what comes after
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await inserting
    async with engine.connect() as connection:
        records = await connection.scalar(text("SELECT count(*) FROM usage_records"))
        daily = await connection.scalar(text("SELECT sum(requests) FROM usage_daily"))
    await engine.dispose()

    assert records == written
    assert daily == written


async def test_upkeep_has_nothing_to_do_on_sqlite(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    done = await keep_usage_storage(session_factory(engine), UsageUpkeep(months_ahead=3, retention_months=1))
    await engine.dispose()
    assert (done.created, done.dropped) == ([], [])


def test_storage_settings_from_the_environment(tmp_path: Path) -> None:
    environ = {
        "GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)),
        "GATEWAY_DATABASE_URL": "postgresql://gw@primary/gateway",
        "GATEWAY_DATABASE_READ_URL": "postgresql://reports@replica/gateway",
        "GATEWAY_USAGE_RETENTION_MONTHS": "13",
        "GATEWAY_USAGE_PARTITIONS_AHEAD": "6",
    }
    settings = load_settings(environ)
    defaults = load_settings({"GATEWAY_CONFIG": environ["GATEWAY_CONFIG"]})

    assert settings.database_read_url == "postgresql://reports@replica/gateway"
    assert (settings.usage_retention_months, settings.usage_partitions_ahead) == (13, 6)
    assert (defaults.database_read_url, defaults.usage_retention_months, defaults.usage_partitions_ahead) == (
        None,
        None,
        3,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GATEWAY_DATABASE_READ_URL", "mysql://db/gateway", "GATEWAY_DATABASE_READ_URL: unsupported scheme"),
        ("GATEWAY_USAGE_RETENTION_MONTHS", "0", "GATEWAY_USAGE_RETENTION_MONTHS: must be at least 1"),
        ("GATEWAY_USAGE_PARTITIONS_AHEAD", "-1", "GATEWAY_USAGE_PARTITIONS_AHEAD: must not be negative"),
    ],
)
def test_storage_settings_are_checked(tmp_path: Path, name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings({"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)), name: value})
