"""usage_records.client_request_id: the client's own X-Request-ID, kept beside the gateway's id.

Nullable without a default, so neither PostgreSQL nor SQLite rewrites the table; older records
keep a null. Dropping a column on SQLite recreates the table, as Alembic's batch mode does.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("usage_records", sa.Column("client_request_id", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("client_request_id")
