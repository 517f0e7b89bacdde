"""usage_reconciliations: each day's comparison of the gateway's usage records with a provider's
own usage and cost reports (gateway.reconciliation).

One row per (day, provider, model, tier, measure): the gateway's figure, the provider's, their
difference (the provider's less the gateway's), its share of the larger, and whether that share is
past the threshold. `model` is the name the provider knows (the records' upstream model); `tier`
is the service tier ("default" for the provider's standard one, "*" where a report does not split
by tier). A day is stored again whole each time it is reconciled.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    amount = sa.Numeric(precision=30, scale=10)
    op.create_table(
        "usage_reconciliations",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("provider", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("measure", sa.String(length=16), nullable=False),
        sa.Column("gateway", amount, nullable=False),
        sa.Column("reported", amount, nullable=False),
        sa.Column("difference", amount, nullable=False),
        sa.Column("share", sa.Float(), nullable=False),
        sa.Column("exceeded", sa.Boolean(), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "day", "provider", "model", "tier", "measure", name="pk_usage_reconciliations"
        ),
    )


def downgrade() -> None:
    op.drop_table("usage_reconciliations")
