"""Tables: teams, their API keys (hashes only), one usage record per upstream request, and the
usage events the database refused (dead letters)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base

Money = Numeric(20, 10)


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    allowed_models: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    allowed_regions: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    monthly_budget_usd: Mapped[Decimal | None] = mapped_column(Money, default=None)
    rpm_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    tpm_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    # the team's share of a busy upstream relative to the other waiting teams (gateway.scheduling)
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the secret
    key_prefix: Mapped[str] = mapped_column(String(16))
    allowed_models: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    allowed_regions: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    monthly_budget_usd: Mapped[Decimal | None] = mapped_column(Money, default=None)
    rpm_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    tpm_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class UsageRecord(Base):
    __tablename__ = "usage_records"
    __table_args__ = (
        Index("ix_usage_records_team_created", "team_id", "created_at"),
        Index("ix_usage_records_created", "created_at"),
        Index("ix_usage_records_batch", "team_id", "batch_id"),
    )

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    team_id: Mapped[str] = mapped_column(String(40))
    key_id: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(200))
    provider: Mapped[str] = mapped_column(String(200))
    region: Mapped[str] = mapped_column(String(100))
    deployment: Mapped[str] = mapped_column(String(400))
    upstream_model: Mapped[str] = mapped_column(String(200))
    endpoint: Mapped[str] = mapped_column(String(40))
    batch_id: Mapped[str | None] = mapped_column(String(128), default=None)
    status: Mapped[int] = mapped_column(Integer)
    # BIGINT: a count is bounded per request (gateway.providers.usage_bounds), not by int4
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    usage_source: Mapped[str] = mapped_column(String(16))
    cost: Mapped[Decimal] = mapped_column(Money)
    # what the request would have cost with no prompt caching; report "saving" = sum(this - cost)
    uncached_cost: Mapped[Decimal] = mapped_column(Money, default=Decimal(0))
    latency_ms: Mapped[float] = mapped_column(Numeric(12, 3))
    ttft_ms: Mapped[float | None] = mapped_column(Numeric(12, 3), default=None)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)


class UsageDeadLetter(Base):
    """A usage event the database refused, or that could not be encoded for it, kept for an operator.

    Unbounded text throughout: what made the record unwritable (an over-long id) must not stop its
    dead letter too."""

    __tablename__ = "usage_dead_letters"

    request_id: Mapped[str] = mapped_column(Text, primary_key=True)
    refused_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(Text)  # the error's kind (`OverflowError`), never its values
    event: Mapped[str] = mapped_column(Text)  # the UsageEvent as JSON, as the buffer held it
