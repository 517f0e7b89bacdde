"""stored_responses: the Responses the gateway keeps for their team (`store: true`).

One row per (team, response id), the Response and its input items as JSON text, on PostgreSQL and
SQLite alike; `created_at` is indexed for the retention purge, which deletes the oldest first.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stored_responses",
        sa.Column("team_id", sa.String(length=40), primary_key=True),
        sa.Column("response_id", sa.String(length=255), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("previous_response_id", sa.String(length=255), nullable=True),
        sa.Column("upstream_provider", sa.String(length=200), nullable=True),
        sa.Column("input_items", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
    )
    op.create_index("ix_stored_responses_created", "stored_responses", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_stored_responses_created", table_name="stored_responses")
    op.drop_table("stored_responses")
