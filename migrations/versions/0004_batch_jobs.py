"""The Files and Batch APIs: files (their bytes apart), batch jobs, and each job's lines (the ledger).

New tables only: nothing existing is rewritten.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batch_jobs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint", sa.String(length=40), nullable=False),
        sa.Column("input_file_id", sa.String(length=40), nullable=False),
        sa.Column("output_file_id", sa.String(length=40), nullable=True),
        sa.Column("error_file_id", sa.String(length=40), nullable=True),
        sa.Column("completion_window", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("directives", sa.JSON(), nullable=True),
        sa.Column("deployment", sa.String(length=400), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("request_total", sa.Integer(), nullable=False),
        sa.Column("request_completed", sa.Integer(), nullable=False),
        sa.Column("request_failed", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("in_progress_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finalizing_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelling_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("paused_reason", sa.String(length=200), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_jobs")),
    )
    with op.batch_alter_table("batch_jobs", schema=None) as batch_op:
        batch_op.create_index("ix_batch_jobs_status", ["status"], unique=False)
        batch_op.create_index("ix_batch_jobs_team_created", ["team_id", "created_at"], unique=False)

    op.create_table(
        "files",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("filename", sa.String(length=512), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.create_index("ix_files_team_created", ["team_id", "created_at"], unique=False)

    op.create_table(
        "batch_lines",
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("custom_id", sa.String(length=512), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("prefix_key", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["batch_jobs.id"], name=op.f("fk_batch_lines_job_id_batch_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "line_no", name=op.f("pk_batch_lines")),
    )
    with op.batch_alter_table("batch_lines", schema=None) as batch_op:
        batch_op.create_index("ix_batch_lines_job_state", ["job_id", "state"], unique=False)

    op.create_table(
        "file_contents",
        sa.Column("file_id", sa.String(length=40), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["file_id"], ["files.id"], name=op.f("fk_file_contents_file_id_files"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("file_id", name=op.f("pk_file_contents")),
    )


def downgrade() -> None:
    op.drop_table("file_contents")
    with op.batch_alter_table("batch_lines", schema=None) as batch_op:
        batch_op.drop_index("ix_batch_lines_job_state")

    op.drop_table("batch_lines")
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.drop_index("ix_files_team_created")

    op.drop_table("files")
    with op.batch_alter_table("batch_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_batch_jobs_team_created")
        batch_op.drop_index("ix_batch_jobs_status")

    op.drop_table("batch_jobs")
