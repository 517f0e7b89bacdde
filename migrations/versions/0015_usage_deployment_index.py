"""usage_records by deployment: a batch quote reads a deployment's recent records (its batches'
measured rates, `gateway.jobs.quotes.duration.batch_history`), newest first. Without an index
leading with the deployment, that query walked every deployment's records of the last days by
`created_at` to keep one deployment's.

On PostgreSQL the table is partitioned by month (0008): an index made on it is made on each of
its partitions, and on every partition made later.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_usage_records_deployment_created", "usage_records", ["deployment", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_records_deployment_created", table_name="usage_records")
