"""teams.weight: a team's share of a busy upstream in the fair queue; existing teams get 1.

The column is added with its server default, so neither PostgreSQL nor SQLite rewrites the
table. Dropping it on SQLite recreates the table, as Alembic's batch mode does.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-13
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("teams", sa.Column("weight", sa.Float(), server_default=sa.text("1"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("weight")
