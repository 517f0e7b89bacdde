"""batch_lines: the run of a line in flight, written before it is sent, and its failures.

A line's run is written down before its request goes out (its request id, when it started, the
deployment it went to), so that a process killed with it in flight leaves something to meter: the
next holder of the job records each such orphaned run once, estimated. `runs` counts the runs
started (the next one's request id), `failures` the sends that broke. Columns with constant
defaults: neither PostgreSQL (11+) nor SQLite rewrites the table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("runs", "failures", "attempt_request_id", "attempt_started_at", "attempt_deployment")


def upgrade() -> None:
    op.add_column("batch_lines", sa.Column("runs", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("batch_lines", sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("batch_lines", sa.Column("attempt_request_id", sa.String(length=64), nullable=True))
    op.add_column("batch_lines", sa.Column("attempt_started_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("batch_lines", sa.Column("attempt_deployment", sa.String(length=400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batch_lines") as batch:
        for column in reversed(COLUMNS):
            batch.drop_column(column)
