"""Migration 0013 on PostgreSQL and SQLite: usage_records.service_tier, and usage_daily split by it
with the records already counted kept, and the tiers added back together by the downgrade."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from gateway.db.session import create_engine
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.unit.db.test_migrate import migrate

pytestmark = pytest.mark.integration

COLUMNS = (
    "request_id, created_at, team_id, key_id, model, provider, region, deployment, upstream_model, "
    "endpoint, status, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, "
    "usage_source, cost, uncached_cost, latency_ms"
)
DAILY = "SELECT service_tier, requests, prompt_tokens, cost_units FROM usage_daily ORDER BY service_tier"


def record(request_id: str, cost: str, tier: str | None = None) -> str:
    values = (
        f"'{request_id}', '2026-12-01 10:00:00', 't', 'k', 'm', 'p', 'r', 'd', 'u', 'chat/completions', "
        f"200, 10, 2, 0, 0, 'upstream', {cost}, {cost}, 1"
    )
    if tier is None:
        return f"INSERT INTO usage_records ({COLUMNS}) VALUES ({values})"
    return f"INSERT INTO usage_records ({COLUMNS}, service_tier) VALUES ({values}, '{tier}')"


async def split_and_merge(url: str) -> tuple[list[tuple[object, ...]], ...]:
    """The daily totals after each step: a record at 0012, upgraded, two tiered records, a
    deleted one, downgraded."""
    await migrate(url, command.upgrade, "0012")
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(record("old", "0.5")))
    await migrate(url, command.upgrade, "0013")
    async with engine.begin() as connection:
        upgraded = [tuple(row) for row in await connection.execute(text(DAILY))]
        await connection.execute(text(record("flex", "0.25", "flex")))
        await connection.execute(text(record("flex2", "0.125", "flex")))
        await connection.execute(text(record("none", "0.5")))
        await connection.execute(text("DELETE FROM usage_records WHERE request_id = 'flex2'"))
        split = [tuple(row) for row in await connection.execute(text(DAILY))]
    await migrate(url, command.downgrade, "0012")
    async with engine.begin() as connection:
        query = "SELECT requests, prompt_tokens, cost_units FROM usage_daily"
        merged = [tuple(row) for row in await connection.execute(text(query))]
    await engine.dispose()
    return upgraded, split, merged


def check(
    upgraded: list[tuple[object, ...]], split: list[tuple[object, ...]], merged: list[tuple[object, ...]]
) -> None:
    assert upgraded == [("", 1, 10, 5_000_000_000)]
    assert split == [("", 2, 20, 10_000_000_000), ("flex", 1, 10, 2_500_000_000)]
    assert merged == [(3, 30, 12_500_000_000)]


async def test_postgres_daily_totals_split_by_tier_and_merge_back() -> None:
    database = "gateway_test_metering_migrate_tier"
    await create_database(database)
    try:
        check(*await split_and_merge(pg_url(database)))
    finally:
        await drop_database(database)


async def test_sqlite_daily_totals_split_by_tier_and_merge_back(tmp_path: Path) -> None:
    check(*await split_and_merge(f"sqlite+aiosqlite:///{tmp_path / 'tiers.db'}"))
