"""usage_records partitioned by month on PostgreSQL; usage_retention, where records end.

PostgreSQL: usage_records becomes `PARTITION BY RANGE (created_at)`, one partition per UTC month
(usage_records_2026_12 holds [2026-12-01, 2027-01-01) UTC) and a DEFAULT partition for a record
no month partition takes (a clock far off), so the writer never loses a record to a missing
partition. The months of the records already there and the current month with three ahead are
created here; `gateway.metering.storage.partitions` keeps creating them ahead from then on.

The primary key becomes (request_id, created_at): a unique key on a partitioned table must hold
the partition key. It still skips every duplicate the writer sees: a usage event's created_at is
the moment its request arrived, fixed in the frozen event that the buffer carries, so an event
delivered again (a retry, a reclaimed stream entry, a spooled copy) has the same pair.

Existing rows are moved, not attached: the old table is renamed, the partitioned one created, every
row copied across (routed to its month) and the old table dropped, all in this one transaction
under an ACCESS EXCLUSIVE lock, so writers wait (and retry) and reports wait until it commits. The
cost is one rewrite of the table and a build of its indexes, about as long as a
`VACUUM FULL` of it; a table of many millions of rows is better migrated in a quiet hour. The copy
runs before the usage_daily triggers are moved onto the new table, so the daily totals (already
complete) are not counted again.

Both: usage_retention holds the moment records are kept from once retention has dropped a month;
the reports answer from usage_daily alone before it and refuse what only records could answer.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHS_AHEAD = 3
OLD = "usage_records_unpartitioned"
INDEXES = {
    "ix_usage_records_team_created": "team_id, created_at",
    "ix_usage_records_created": "created_at",
    "ix_usage_records_batch": "team_id, batch_id, created_at",
    "ix_usage_records_key_created": "key_id, created_at",
    "ix_usage_records_batch_created": "batch_id, created_at",
}
# 0007's triggers: event, then what follows the table's name. Their functions stay as they are:
# they name usage_records, which the new table is.
TRIGGERS = {
    "usage_daily_insert": ("INSERT", "REFERENCING NEW TABLE AS new_records", "usage_daily_add"),
    "usage_daily_delete": ("DELETE", "REFERENCING OLD TABLE AS old_records", "usage_daily_subtract"),
    "usage_daily_update_old": ("UPDATE", "REFERENCING OLD TABLE AS old_records", "usage_daily_subtract"),
    "usage_daily_update_new": ("UPDATE", "REFERENCING NEW TABLE AS new_records", "usage_daily_add"),
    "usage_daily_truncate": ("TRUNCATE", "", "usage_daily_clear"),
}


def upgrade() -> None:
    op.create_table(
        "usage_retention",
        sa.Column("records_from", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("records_from", name=op.f("pk_usage_retention")),
    )
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite keeps one plain table
    op.execute("LOCK TABLE usage_records IN ACCESS EXCLUSIVE MODE")
    _drop_triggers()
    _set_aside_old_table("pk_usage_records", "pk_usage_records_unpartitioned")
    op.execute(f"CREATE TABLE usage_records (LIKE {OLD} INCLUDING DEFAULTS) PARTITION BY RANGE (created_at)")
    op.execute("CREATE TABLE usage_records_default PARTITION OF usage_records DEFAULT")
    for month in _months_to_create():
        op.execute(_month_partition(month))
    _copy_rows_from_old_table()
    op.execute(
        "ALTER TABLE usage_records ADD CONSTRAINT pk_usage_records PRIMARY KEY (request_id, created_at)"
    )
    _create_indexes()
    _create_triggers()


def _months_to_create() -> list[date]:
    """The first day of every month from the oldest record's to MONTHS_AHEAD past the current one."""
    oldest = op.get_bind().execute(sa.text(f"SELECT min(created_at) FROM {OLD}")).scalar()  # noqa: S608
    now = datetime.now(UTC)
    first = _month_of(oldest.astimezone(UTC) if oldest is not None else now)
    last = _add_months(_month_of(now), MONTHS_AHEAD)
    newest = op.get_bind().execute(sa.text(f"SELECT max(created_at) FROM {OLD}")).scalar()  # noqa: S608
    if newest is not None:
        last = max(last, _month_of(newest.astimezone(UTC)))
    months = [first]
    while months[-1] < last:
        months.append(_add_months(months[-1], 1))
    return months


def _month_of(moment: datetime) -> date:
    return date(moment.year, moment.month, 1)


def _add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def _month_partition(month: date) -> str:
    after = _add_months(month, 1)
    return (
        f"CREATE TABLE usage_records_{month:%Y_%m} PARTITION OF usage_records "
        f"FOR VALUES FROM ('{month.isoformat()} 00:00:00+00') TO ('{after.isoformat()} 00:00:00+00')"
    )


def _set_aside_old_table(key: str, aside: str) -> None:
    """Rename usage_records out of the way, with its key, and drop its indexes (their names are
    the new table's; the copy reads the whole table, so it needs none)."""
    op.execute(f"ALTER TABLE usage_records RENAME TO {OLD}")
    op.execute(f"ALTER TABLE {OLD} RENAME CONSTRAINT {key} TO {aside}")
    for name in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")


def _copy_rows_from_old_table() -> None:
    op.execute(f"INSERT INTO usage_records SELECT * FROM {OLD}")  # noqa: S608 - fixed names
    op.execute(f"DROP TABLE {OLD}")


def _create_indexes() -> None:
    for name, columns in INDEXES.items():
        op.execute(f"CREATE INDEX {name} ON usage_records ({columns})")


def _create_triggers() -> None:
    for name, (event, tables, function) in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON usage_records {tables} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )


def _drop_triggers() -> None:
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON usage_records")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("LOCK TABLE usage_records IN ACCESS EXCLUSIVE MODE")
        _drop_triggers()
        _set_aside_old_table("pk_usage_records", "pk_usage_records_partitioned")
        op.execute(f"CREATE TABLE usage_records (LIKE {OLD} INCLUDING DEFAULTS)")
        _copy_rows_from_old_table()  # DROP TABLE of the partitioned table drops its partitions
        op.execute("ALTER TABLE usage_records ADD CONSTRAINT pk_usage_records PRIMARY KEY (request_id)")
        _create_indexes()
        _create_triggers()
    op.drop_table("usage_retention")
