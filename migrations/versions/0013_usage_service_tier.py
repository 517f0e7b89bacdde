"""usage_records.service_tier, and usage_daily's totals split by it.

usage_records gains `service_tier`: the tier the provider served the request at (OpenAI's
`service_tier` in its answer), else the one the client asked for, else null. Nullable without a
default, so neither PostgreSQL nor SQLite rewrites the records; older records keep a null.

usage_daily gains `service_tier` in its key ("" for none, as `batch_id`: never NULL in a key), so
that a day's cost per model and tier can be set beside a provider's bill. Every existing group
holds records without a tier, so its rows take "" and stay right; the triggers (0007) are given
the new group. On PostgreSQL that is a new body for each trigger function (the triggers keep
calling them by name); on SQLite the row triggers are dropped, usage_daily is rebuilt with its new
key (SQLite cannot change a primary key in place) and the triggers are created again.

Both lock usage_records against writes first, as 0007 does, so that no record lands between the
old group and the new. The downgrade adds each day's tiers back together.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNITS = 10_000_000_000  # 1e-10 USD: the scale of usage_records.cost
KEY_COLUMNS = ["day", "team_id", "key_id", "model", "provider", "region", "batch_id"]
TOTALS = [
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cost_units",
    "uncached_cost_units",
]


def _key(tiered: bool) -> list[str]:
    return [*KEY_COLUMNS, "service_tier"] if tiered else KEY_COLUMNS


# PostgreSQL: each trigger function's body, with or without the tier in the group.


def _pg_groups(records: str, tiered: bool) -> str:
    """The totals of the records in `records` per group, in key order."""
    tier = ", coalesce(service_tier, '') AS service_tier" if tiered else ""
    positions = ", ".join(str(i) for i in range(1, len(_key(tiered)) + 1))
    return (
        "SELECT (created_at AT TIME ZONE 'UTC')::date AS day, team_id, key_id, model, provider, region, "
        f"coalesce(batch_id, '') AS batch_id{tier}, count(*) AS requests, "
        "sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, "
        "sum(cached_tokens) AS cached_tokens, sum(cache_write_tokens) AS cache_write_tokens, "
        f"sum(cost) * {UNITS} AS cost_units, sum(uncached_cost) * {UNITS} AS uncached_cost_units "
        f"FROM {records} GROUP BY {positions} ORDER BY {positions}"
    )


def _pg_functions(tiered: bool) -> dict[str, str]:
    key = ", ".join(_key(tiered))
    totals = ", ".join(TOTALS)
    added = ", ".join(f"{name} = usage_daily.{name} + excluded.{name}" for name in TOTALS)
    subtracted = ", ".join(f"{name} = daily.{name} - gone.{name}" for name in TOTALS)
    return {
        "usage_daily_add": (
            f"INSERT INTO usage_daily ({key}, {totals}) {_pg_groups('new_records', tiered)} "
            f"ON CONFLICT ({key}) DO UPDATE SET {added};"
        ),
        "usage_daily_subtract": f"""
            UPDATE usage_daily AS daily SET {subtracted}
            FROM ({_pg_groups("old_records", tiered)}) AS gone
            WHERE ({", ".join(f"daily.{c}" for c in _key(tiered))})
                = ({", ".join(f"gone.{c}" for c in _key(tiered))});
            DELETE FROM usage_daily WHERE requests = 0
                AND day BETWEEN (SELECT min((created_at AT TIME ZONE 'UTC')::date) FROM old_records)
                    AND (SELECT max((created_at AT TIME ZONE 'UTC')::date) FROM old_records);""",
    }


def _replace_pg_functions(tiered: bool) -> None:
    for name, body in _pg_functions(tiered).items():
        op.execute(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN {body} RETURN NULL; END $$"
        )


def _set_pg_key(tiered: bool) -> None:
    op.execute("ALTER TABLE usage_daily DROP CONSTRAINT pk_usage_daily")
    op.execute(
        f"ALTER TABLE usage_daily ADD CONSTRAINT pk_usage_daily PRIMARY KEY ({', '.join(_key(tiered))})"
    )


# SQLite: row triggers, with or without the tier in the group.


def _sqlite_group(row: str, tiered: bool) -> list[str]:
    """A record's group (`row` is "NEW.", "OLD." or "" for the table itself)."""
    columns = ["team_id", "key_id", "model", "provider", "region"]
    group = [f"date({row}created_at)", *(row + c for c in columns), f"coalesce({row}batch_id, '')"]
    return [*group, f"coalesce({row}service_tier, '')"] if tiered else group


def _sqlite_totals(row: str) -> list[str]:
    """A record's share of each total: money rounded to whole units, as the reports sum it."""
    tokens = ["prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens"]
    money = [f"CAST(round({row}{c} * {UNITS}) AS INTEGER)" for c in ("cost", "uncached_cost")]
    return ["1", *(row + c for c in tokens), *money]


def _sqlite_add(row: str, tiered: bool) -> str:
    key = ", ".join(_key(tiered))
    values = ", ".join(_sqlite_group(row, tiered) + _sqlite_totals(row))
    added = ", ".join(f"{name} = usage_daily.{name} + excluded.{name}" for name in TOTALS)
    return f"INSERT INTO usage_daily ({key}, {', '.join(TOTALS)}) VALUES ({values}) ON CONFLICT ({key}) DO UPDATE SET {added};"


def _sqlite_subtract(row: str, tiered: bool) -> str:
    pairs = zip(TOTALS, _sqlite_totals(row), strict=True)
    subtracted = ", ".join(f"{name} = {name} - {value}" for name, value in pairs)
    match = " AND ".join(f"{c} = {v}" for c, v in zip(_key(tiered), _sqlite_group(row, tiered), strict=True))
    return (
        f"UPDATE usage_daily SET {subtracted} WHERE {match}; "
        f"DELETE FROM usage_daily WHERE {match} AND requests = 0;"
    )


def _sqlite_triggers(tiered: bool) -> dict[str, tuple[str, str]]:
    return {
        "usage_daily_insert": ("INSERT", _sqlite_add("NEW.", tiered)),
        "usage_daily_delete": ("DELETE", _sqlite_subtract("OLD.", tiered)),
        "usage_daily_update": (
            "UPDATE",
            _sqlite_subtract("OLD.", tiered) + " " + _sqlite_add("NEW.", tiered),
        ),
    }


def _lock_sqlite_writers() -> None:
    """Take SQLite's write lock now, for the rest of this migration's transaction (see 0007)."""
    dbapi = op.get_bind().connection.dbapi_connection
    driver = getattr(dbapi, "_connection", dbapi)  # aiosqlite's connection under SQLAlchemy's adapter
    if not getattr(driver, "in_transaction", False):
        op.execute("BEGIN IMMEDIATE")


def _rebuild_sqlite_daily(tiered: bool) -> None:
    """usage_daily again, keyed with or without the tier, holding the same totals (summed over the
    tiers when they leave the key), with its triggers on usage_records given the same group."""
    for name in _sqlite_triggers(tiered):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    units = sa.Numeric(precision=30, scale=0)
    strings = {"team_id": 40, "key_id": 40, "model": 200, "provider": 200, "region": 100, "batch_id": 128}
    columns = [sa.Column("day", sa.Date(), nullable=False)]
    columns += [sa.Column(name, sa.String(length=size), nullable=False) for name, size in strings.items()]
    if tiered:
        columns.append(sa.Column("service_tier", sa.String(length=16), nullable=False))
    columns += [sa.Column(name, sa.BigInteger(), nullable=False) for name in TOTALS[:5]]
    columns += [sa.Column(name, units, nullable=False) for name in TOTALS[5:]]
    op.create_table(
        "usage_daily_rebuilt", *columns, sa.PrimaryKeyConstraint(*_key(tiered), name="pk_usage_daily")
    )
    key = ", ".join(_key(tiered))
    selected = ", ".join([*KEY_COLUMNS, "''"] if tiered else KEY_COLUMNS)
    summed = ", ".join(f"sum({name})" for name in TOTALS)
    op.execute(
        f"INSERT INTO usage_daily_rebuilt ({key}, {', '.join(TOTALS)}) "  # noqa: S608 - fixed names
        f"SELECT {selected}, {summed} FROM usage_daily GROUP BY {', '.join(KEY_COLUMNS)}"
    )
    op.drop_index("ix_usage_daily_team_day", table_name="usage_daily")
    op.drop_table("usage_daily")
    op.rename_table("usage_daily_rebuilt", "usage_daily")
    op.create_index("ix_usage_daily_team_day", "usage_daily", ["team_id", "day"], unique=False)
    for name, (event, body) in _sqlite_triggers(tiered).items():
        op.execute(f"CREATE TRIGGER {name} AFTER {event} ON usage_records BEGIN {body} END")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("LOCK TABLE usage_records IN SHARE ROW EXCLUSIVE MODE")
    else:
        _lock_sqlite_writers()
    op.add_column("usage_records", sa.Column("service_tier", sa.String(length=16), nullable=True))
    if postgres:
        op.execute("LOCK TABLE usage_daily IN ACCESS EXCLUSIVE MODE")
        op.execute("ALTER TABLE usage_daily ADD COLUMN service_tier VARCHAR(16) NOT NULL DEFAULT ''")
        op.execute("ALTER TABLE usage_daily ALTER COLUMN service_tier DROP DEFAULT")
        _set_pg_key(tiered=True)
        _replace_pg_functions(tiered=True)
    else:
        _rebuild_sqlite_daily(tiered=True)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("LOCK TABLE usage_records IN SHARE ROW EXCLUSIVE MODE")
        op.execute("LOCK TABLE usage_daily IN ACCESS EXCLUSIVE MODE")
        _merge_pg_tiers()
        _replace_pg_functions(tiered=False)
        op.execute("ALTER TABLE usage_records DROP COLUMN service_tier")
    else:
        _lock_sqlite_writers()
        # first: batch mode recreates usage_records, which drops its triggers (created again next)
        with op.batch_alter_table("usage_records") as batch:
            batch.drop_column("service_tier")
        _rebuild_sqlite_daily(tiered=False)


def _merge_pg_tiers() -> None:
    """usage_daily's rows of one group but different tiers added together, the tier column dropped."""
    key = ", ".join(KEY_COLUMNS)
    summed = ", ".join(f"sum({name}) AS {name}" for name in TOTALS)
    op.execute(
        f"CREATE TEMPORARY TABLE usage_daily_merged ON COMMIT DROP AS "  # noqa: S608 - fixed names
        f"SELECT {key}, {summed} FROM usage_daily GROUP BY {key}"
    )
    op.execute("DELETE FROM usage_daily")
    op.execute("ALTER TABLE usage_daily DROP CONSTRAINT pk_usage_daily")
    op.execute("ALTER TABLE usage_daily DROP COLUMN service_tier")
    op.execute(f"ALTER TABLE usage_daily ADD CONSTRAINT pk_usage_daily PRIMARY KEY ({key})")
    op.execute(
        f"INSERT INTO usage_daily ({key}, {', '.join(TOTALS)}) SELECT {key}, {', '.join(TOTALS)} FROM usage_daily_merged"
    )  # noqa: S608
