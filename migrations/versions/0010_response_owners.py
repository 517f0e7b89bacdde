"""response_owners: which team created which response id (the Responses API served natively).

A plain table on both PostgreSQL and SQLite: one row per response id an upstream returned, keyed
by the id, so that the writer's `ON CONFLICT DO NOTHING` makes a redelivered event harmless.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "response_owners",
        sa.Column("response_id", sa.String(length=255), primary_key=True),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("response_owners")
