"""usage_daily: the usage records' totals per UTC day and (team, key, model, provider, region,
batch), kept by triggers on usage_records and backfilled from the records already there; and the
indexes the usage pages read by (a team's batches from the index alone, a key's and a batch's
records in time order).

The triggers run inside the statement that changes the records, whichever code issues it (the
usage writer's COPY or its `ON CONFLICT DO NOTHING` insert, the batch ledger, an operator's
DELETE): a record skipped as a duplicate fires nothing, a deleted one is subtracted, and a group
whose last record is gone is removed. PostgreSQL aggregates each statement's rows once (transition
tables) and upserts the groups in key order, so concurrent writers lock them in the same order;
SQLite, which has no statement triggers, does the same a row at a time. Money is kept in whole
units of 1e-10 USD, the records' scale, so that sums stay exact on SQLite as on PostgreSQL.

The upgrade locks usage_records against writes first (the writer retries until it is done), so
that no record lands between the backfill and the triggers: on PostgreSQL with a table lock, on
SQLite with BEGIN IMMEDIATE, since pysqlite opens a transaction only before DML and would otherwise
commit each CREATE on its own (a record written between the triggers and the backfill was then
counted twice, and the backfill failed on usage_daily's key). A later migration that recreates
usage_records on SQLite (Alembic's batch mode, for a dropped or altered column) drops its
triggers with the old table and must create them again.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNITS = 10_000_000_000  # 1e-10 USD: the scale of usage_records.cost
GROUP = "day, team_id, key_id, model, provider, region, batch_id"
TOTALS = (
    "requests, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, "
    "cost_units, uncached_cost_units"
)
ADDED = ", ".join(f"{name} = usage_daily.{name} + excluded.{name}" for name in TOTALS.split(", "))
SUBTRACTED = ", ".join(f"{name} = daily.{name} - gone.{name}" for name in TOTALS.split(", "))


def _pg_groups(records: str) -> str:
    """The totals of the records in `records` per group, in key order (PostgreSQL)."""
    return (
        f"SELECT (created_at AT TIME ZONE 'UTC')::date AS day, team_id, key_id, model, provider, region, "
        f"coalesce(batch_id, '') AS batch_id, count(*) AS requests, sum(prompt_tokens) AS prompt_tokens, "
        f"sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens, "
        f"sum(cache_write_tokens) AS cache_write_tokens, sum(cost) * {UNITS} AS cost_units, "
        f"sum(uncached_cost) * {UNITS} AS uncached_cost_units "
        f"FROM {records} GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 7"
    )


def _pg_upsert(records: str) -> str:
    return (
        f"INSERT INTO usage_daily ({GROUP}, {TOTALS}) {_pg_groups(records)} "
        f"ON CONFLICT ({GROUP}) DO UPDATE SET {ADDED}"
    )


PG_FUNCTIONS = {
    "usage_daily_add": f"{_pg_upsert('new_records')};",
    "usage_daily_subtract": f"""
        UPDATE usage_daily AS daily SET {SUBTRACTED}
        FROM ({_pg_groups("old_records")}) AS gone
        WHERE ({", ".join(f"daily.{c}" for c in GROUP.split(", "))})
            = ({", ".join(f"gone.{c}" for c in GROUP.split(", "))});
        DELETE FROM usage_daily WHERE requests = 0
            AND day BETWEEN (SELECT min((created_at AT TIME ZONE 'UTC')::date) FROM old_records)
                AND (SELECT max((created_at AT TIME ZONE 'UTC')::date) FROM old_records);""",
    "usage_daily_clear": "TRUNCATE usage_daily;",
}
# name: (when, transition tables, function); an UPDATE is its old rows taken away, its new ones added
PG_TRIGGERS = {
    "usage_daily_insert": ("INSERT", "NEW TABLE AS new_records", "usage_daily_add"),
    "usage_daily_delete": ("DELETE", "OLD TABLE AS old_records", "usage_daily_subtract"),
    "usage_daily_update_old": ("UPDATE", "OLD TABLE AS old_records", "usage_daily_subtract"),
    "usage_daily_update_new": ("UPDATE", "NEW TABLE AS new_records", "usage_daily_add"),
}


def _sqlite_group(row: str) -> list[str]:
    """A record's group (SQLite; `row` is "NEW.", "OLD." or "" for the table itself)."""
    columns = ["team_id", "key_id", "model", "provider", "region"]
    return [f"date({row}created_at)", *(row + c for c in columns), f"coalesce({row}batch_id, '')"]


def _sqlite_totals(row: str) -> list[str]:
    """A record's share of each total (SQLite): money rounded to whole units, as the reports sum it."""
    tokens = ["prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens"]
    money = [f"CAST(round({row}{c} * {UNITS}) AS INTEGER)" for c in ("cost", "uncached_cost")]
    return ["1", *(row + c for c in tokens), *money]


def _sqlite_add(row: str) -> str:
    values = ", ".join(_sqlite_group(row) + _sqlite_totals(row))
    return (
        f"INSERT INTO usage_daily ({GROUP}, {TOTALS}) VALUES ({values}) "
        f"ON CONFLICT ({GROUP}) DO UPDATE SET {ADDED};"
    )


def _sqlite_subtract(row: str) -> str:
    pairs = zip(TOTALS.split(", "), _sqlite_totals(row), strict=True)
    subtracted = ", ".join(f"{name} = {name} - {value}" for name, value in pairs)
    match = " AND ".join(f"{c} = {v}" for c, v in zip(GROUP.split(", "), _sqlite_group(row), strict=True))
    return (
        f"UPDATE usage_daily SET {subtracted} WHERE {match}; "
        f"DELETE FROM usage_daily WHERE {match} AND requests = 0;"
    )


SQLITE_TRIGGERS = {
    "usage_daily_insert": ("INSERT", _sqlite_add("NEW.")),
    "usage_daily_delete": ("DELETE", _sqlite_subtract("OLD.")),
    "usage_daily_update": ("UPDATE", _sqlite_subtract("OLD.") + " " + _sqlite_add("NEW.")),
}


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("LOCK TABLE usage_records IN SHARE ROW EXCLUSIVE MODE")
    else:
        _lock_sqlite_writers()
    units = sa.Numeric(precision=30, scale=0)
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=200), nullable=False),
        sa.Column("region", sa.String(length=100), nullable=False),
        sa.Column("batch_id", sa.String(length=128), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_units", units, nullable=False),
        sa.Column("uncached_cost_units", units, nullable=False),
        sa.PrimaryKeyConstraint(*GROUP.split(", "), name=op.f("pk_usage_daily")),
    )
    op.create_index("ix_usage_daily_team_day", "usage_daily", ["team_id", "day"], unique=False)
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_index("ix_usage_records_batch")
        batch.create_index("ix_usage_records_batch", ["team_id", "batch_id", "created_at"], unique=False)
        batch.create_index("ix_usage_records_key_created", ["key_id", "created_at"], unique=False)
        batch.create_index("ix_usage_records_batch_created", ["batch_id", "created_at"], unique=False)
    if postgres:
        _create_pg_triggers()
        op.execute(_pg_upsert("usage_records"))
    else:
        _create_sqlite_triggers()
        _backfill_sqlite()


def _lock_sqlite_writers() -> None:
    """Take SQLite's write lock now, for the rest of this migration's transaction (Alembic commits
    it with the version stamp); other writers wait (busy_timeout) or retry until then."""
    dbapi = op.get_bind().connection.dbapi_connection
    driver = getattr(dbapi, "_connection", dbapi)  # aiosqlite's connection under SQLAlchemy's adapter
    # In a transaction opened already, the CREATE TABLE below is its first write and takes the lock.
    if not getattr(driver, "in_transaction", False):
        op.execute("BEGIN IMMEDIATE")


def _backfill_sqlite() -> None:
    columns = [*GROUP.split(", "), *TOTALS.split(", ")]
    values = _sqlite_group("") + _sqlite_totals("")
    each = ", ".join(f"{value} AS {name}" for value, name in zip(values, columns, strict=True))
    summed = ", ".join(f"sum({name})" for name in TOTALS.split(", "))
    op.execute(
        f"INSERT INTO usage_daily ({GROUP}, {TOTALS}) SELECT {GROUP}, {summed} "
        f"FROM (SELECT {each} FROM usage_records) GROUP BY {GROUP}"
    )


def _create_pg_triggers() -> None:
    for name, body in PG_FUNCTIONS.items():
        op.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$"
        )
    for name, (event, tables, function) in PG_TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON usage_records REFERENCING {tables} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )
    op.execute(
        "CREATE TRIGGER usage_daily_truncate AFTER TRUNCATE ON usage_records "
        "FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_clear()"
    )


def _create_sqlite_triggers() -> None:
    for name, (event, body) in SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} AFTER {event} ON usage_records BEGIN {body} END")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in [*PG_TRIGGERS, "usage_daily_truncate"] if postgres else SQLITE_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON usage_records" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        for name in PG_FUNCTIONS:
            op.execute(f"DROP FUNCTION {name}()")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_index("ix_usage_records_batch_created")
        batch.drop_index("ix_usage_records_key_created")
        batch.drop_index("ix_usage_records_batch")
        batch.create_index("ix_usage_records_batch", ["team_id", "batch_id"], unique=False)
    op.drop_index("ix_usage_daily_team_day", table_name="usage_daily")
    op.drop_table("usage_daily")
