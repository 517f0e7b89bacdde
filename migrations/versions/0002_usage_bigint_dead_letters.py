"""Usage token counts as BIGINT; usage_dead_letters for the events the database refuses.

On PostgreSQL the four columns change in one ALTER TABLE, which rewrites usage_records under an
exclusive lock: on a large table, run `gateway migrate` at a quiet moment. On SQLite (whose INTEGER
holds 64 bits whatever the declared type) the table is recreated, as Alembic's batch mode does.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens")


def _retype(old: sa.types.TypeEngine[int], new: str, new_type: sa.types.TypeEngine[int]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        clauses = ", ".join(f"ALTER COLUMN {name} TYPE {new}" for name in TOKEN_COLUMNS)
        op.execute(f"ALTER TABLE usage_records {clauses}")
        return
    with op.batch_alter_table("usage_records") as batch:
        for name in TOKEN_COLUMNS:
            batch.alter_column(name, existing_type=old, type_=new_type, existing_nullable=False)


def upgrade() -> None:
    _retype(sa.Integer(), "BIGINT", sa.BigInteger())
    op.create_table(
        "usage_dead_letters",
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("refused_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_usage_dead_letters")),
    )


def downgrade() -> None:
    op.drop_table("usage_dead_letters")
    _retype(sa.BigInteger(), "INTEGER", sa.Integer())  # fails if a stored count is past int4
