"""usage_records.queue_ms (the wait in the gateway's queue) and batch_jobs.provider_batch_id (the
provider batch in flight, until now kept in the job's `directives`).

Both columns are nullable without a default, so neither PostgreSQL nor SQLite rewrites the table;
older records keep a null queue_ms. A provider batch id already kept in a job's directives is
moved into the new column, and back on the downgrade (dropping a column on SQLite recreates the
table, as Alembic's batch mode does).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PROVIDER_BATCH_KEY = "provider_batch_id"
_jobs = sa.table(
    "batch_jobs",
    sa.column("id", sa.String()),
    sa.column("directives", sa.JSON()),
    sa.column("provider_batch_id", sa.String()),
)


def upgrade() -> None:
    op.add_column("usage_records", sa.Column("queue_ms", sa.Numeric(precision=12, scale=3), nullable=True))
    op.add_column("batch_jobs", sa.Column("provider_batch_id", sa.String(length=200), nullable=True))
    connection = op.get_bind()
    # Only jobs with directives can hold one; read in Python, since JSON operators differ by dialect.
    rows = connection.execute(
        sa.select(_jobs.c.id, _jobs.c.directives).where(_jobs.c.directives.is_not(None))
    )
    for job_id, directives in rows.all():
        kept: dict[str, Any] = dict(directives or {})
        batch_id = kept.pop(PROVIDER_BATCH_KEY, None)
        if batch_id is not None:
            connection.execute(
                sa.update(_jobs)
                .where(_jobs.c.id == job_id)
                .values(provider_batch_id=str(batch_id), directives=kept or sa.null())
            )


def downgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(_jobs.c.id, _jobs.c.directives, _jobs.c.provider_batch_id).where(
            _jobs.c.provider_batch_id.is_not(None)
        )
    )
    for job_id, directives, batch_id in rows.all():
        kept = dict(directives or {}) | {PROVIDER_BATCH_KEY: batch_id}
        connection.execute(sa.update(_jobs).where(_jobs.c.id == job_id).values(directives=kept))
    with op.batch_alter_table("batch_jobs") as batch:
        batch.drop_column("provider_batch_id")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("queue_ms")
