"""Initial tables: teams, api_keys, usage_records (as gateway/db/models.py declares them).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONEY = sa.Numeric(precision=20, scale=10)


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("allowed_models", sa.JSON(), nullable=True),
        sa.Column("allowed_regions", sa.JSON(), nullable=True),
        sa.Column("monthly_budget_usd", MONEY, nullable=True),
        sa.Column("rpm_limit", sa.Integer(), nullable=True),
        sa.Column("tpm_limit", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_teams")),
        sa.UniqueConstraint("name", name=op.f("uq_teams_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("allowed_models", sa.JSON(), nullable=True),
        sa.Column("allowed_regions", sa.JSON(), nullable=True),
        sa.Column("monthly_budget_usd", MONEY, nullable=True),
        sa.Column("rpm_limit", sa.Integer(), nullable=True),
        sa.Column("tpm_limit", sa.Integer(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_api_keys_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_team_id"), "api_keys", ["team_id"], unique=False)
    op.create_table(
        "usage_records",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=200), nullable=False),
        sa.Column("region", sa.String(length=100), nullable=False),
        sa.Column("deployment", sa.String(length=400), nullable=False),
        sa.Column("upstream_model", sa.String(length=200), nullable=False),
        sa.Column("endpoint", sa.String(length=40), nullable=False),
        sa.Column("batch_id", sa.String(length=128), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("usage_source", sa.String(length=16), nullable=False),
        sa.Column("cost", MONEY, nullable=False),
        sa.Column("uncached_cost", MONEY, nullable=False),
        sa.Column("latency_ms", sa.Numeric(precision=12, scale=3), nullable=False),
        sa.Column("ttft_ms", sa.Numeric(precision=12, scale=3), nullable=True),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_usage_records")),
    )
    op.create_index("ix_usage_records_batch", "usage_records", ["team_id", "batch_id"], unique=False)
    op.create_index("ix_usage_records_created", "usage_records", ["created_at"], unique=False)
    op.create_index(
        "ix_usage_records_team_created", "usage_records", ["team_id", "created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_usage_records_team_created", table_name="usage_records")
    op.drop_index("ix_usage_records_created", table_name="usage_records")
    op.drop_index("ix_usage_records_batch", table_name="usage_records")
    op.drop_table("usage_records")
    op.drop_index(op.f("ix_api_keys_team_id"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("teams")
