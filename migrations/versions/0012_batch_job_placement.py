"""batch_jobs.placement: the lane a job asked to be placed on was chosen from its quote.

A job created with `metadata.gateway_placement` (`cheapest`, `fastest`, `by_deadline`) keeps the
rule, the lane chosen (deployment, execution mode, service tier) and the quote it was chosen from,
as JSON; the runner reads the lane's execution mode and tier from it. Null for every other job.
A nullable column: neither PostgreSQL nor SQLite rewrites the table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("batch_jobs", sa.Column("placement", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batch_jobs") as batch:
        batch.drop_column("placement")
