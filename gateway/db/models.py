"""Tables: teams, their API keys (hashes only), one usage record per upstream request, their daily
totals and each day's reconciliation with the providers' own reports, the usage events the
database refused (dead letters), which team created which response id, the Responses the gateway
stores; the Files and Batch APIs' files, jobs and their lines."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Numeric,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base

Money = Numeric(20, 10)
MoneyUnits = Numeric(30, 0)  # a sum of Money in its smallest unit


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
        # created_at included: a team's batches and their first and last records, from the index alone
        Index("ix_usage_records_batch", "team_id", "batch_id", "created_at"),
        Index("ix_usage_records_key_created", "key_id", "created_at"),
        Index("ix_usage_records_batch_created", "batch_id", "created_at"),  # a batch's records, any team
        Index("ix_usage_records_deployment_created", "deployment", "created_at"),  # a quote's history
    )

    # On PostgreSQL the key is (request_id, created_at) and the table is partitioned by month on
    # created_at (migration 0008): a redelivered event carries the same created_at, so the pair skips
    # duplicates as the id alone does. Writers say `ON CONFLICT DO NOTHING` without naming the key.
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
    # the wait in the gateway's queue; None for records from before it was kept
    queue_ms: Mapped[float | None] = mapped_column(Numeric(12, 3), default=None)
    # the client's own X-Request-ID (1-128 printable ASCII characters), when it sent one
    client_request_id: Mapped[str | None] = mapped_column(String(128), default=None)
    # the service tier the provider served the request at (its answer's `service_tier`), else the one
    # the client asked for; None: neither said (gateway.metering.events)
    service_tier: Mapped[str | None] = mapped_column(String(16), default=None)


class UsageDaily(Base):
    """The records' totals per UTC day and (team, key, model, provider, region, batch, service tier):
    what the reports read for whole days. Kept by database triggers on usage_records (migrations
    0007, 0013), in
    the statement that inserts, deletes or updates the records, so it always adds up to them."""

    __tablename__ = "usage_daily"
    __table_args__ = (Index("ix_usage_daily_team_day", "team_id", "day"),)

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    team_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    provider: Mapped[str] = mapped_column(String(200), primary_key=True)
    region: Mapped[str] = mapped_column(String(100), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(128), primary_key=True)  # "" for none: never NULL in a key
    service_tier: Mapped[str] = mapped_column(String(16), primary_key=True)  # "" for none, as batch_id
    requests: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    # whole units of 1e-10 USD (the records' money scale): integers, exact on SQLite too
    cost_units: Mapped[Decimal] = mapped_column(MoneyUnits)
    uncached_cost_units: Mapped[Decimal] = mapped_column(MoneyUnits)


class UsageReconciliation(Base):
    """A day's comparison of the records with a provider's own usage and cost reports, one row per
    (day, provider, model, tier, measure) (gateway.reconciliation; migration 0014). `model` is the
    provider's name for it (the records' upstream model); `tier` "default" for the provider's
    standard one, "*" where its report has no tier; `difference` is the provider's figure less the
    gateway's, `share` that over the larger of the two."""

    __tablename__ = "usage_reconciliations"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    provider: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    tier: Mapped[str] = mapped_column(String(16), primary_key=True)
    measure: Mapped[str] = mapped_column(String(16), primary_key=True)  # input, cached_input, output, cost
    gateway: Mapped[Decimal] = mapped_column(Numeric(30, 10))  # tokens, or USD for cost
    reported: Mapped[Decimal] = mapped_column(Numeric(30, 10))
    difference: Mapped[Decimal] = mapped_column(Numeric(30, 10))
    share: Mapped[float] = mapped_column(Float)
    exceeded: Mapped[bool] = mapped_column(Boolean)  # |share| past the threshold when checked
    checked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class UsageRetention(Base):
    """Where the usage records begin once retention has dropped old months
    (gateway.metering.storage.retention): before `records_from` only usage_daily's whole days are kept.
    No row: every record is still there."""

    __tablename__ = "usage_retention"

    records_from: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)


class UsageDeadLetter(Base):
    """A usage event the database refused, or that could not be encoded for it, kept for an operator.

    Unbounded text throughout: what made the record unwritable (an over-long id) must not stop its
    dead letter too."""

    __tablename__ = "usage_dead_letters"

    request_id: Mapped[str] = mapped_column(Text, primary_key=True)
    refused_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(Text)  # the error's kind (`OverflowError`), never its values
    event: Mapped[str] = mapped_column(Text)  # the UsageEvent as JSON, as the buffer held it


class ResponseOwner(Base):
    """Which team created a Response at a provider that stores it (the Responses API served
    natively): a `previous_response_id` or `conversation` naming an id its team did not create is
    refused before it goes upstream (gateway.responses_store.owners). Written by the usage writer,
    with the record of the request that returned the id."""

    __tablename__ = "response_owners"

    response_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    team_id: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class StoredResponse(Base):
    """A Response kept for its team (`store: true`, OpenAI's default), on any provider: what
    `GET /v1/responses/{id}` reads and what a `previous_response_id` continues
    (gateway.dialects.responses.store). Keyed by team and id, so that no query can read another
    team's. Written off the request path; purged once past the retention (`created_at`)."""

    __tablename__ = "stored_responses"
    __table_args__ = (Index("ix_stored_responses_created", "created_at"),)

    team_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    response_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    model: Mapped[str] = mapped_column(String(200))
    # the response this one continues: the conversation is its chain, walked back
    previous_response_id: Mapped[str | None] = mapped_column(String(255), default=None)
    # the provider that stores the Response too (its Responses API served natively), else None
    upstream_provider: Mapped[str | None] = mapped_column(String(200), default=None)
    input_items: Mapped[str] = mapped_column(Text)  # this request's own input items, as JSON
    response: Mapped[str] = mapped_column(Text)  # the Response as answered, as JSON


class StoredFile(Base):
    """A file of the Files API (a batch's input, output or errors), owned by one team. Its bytes
    live apart (`FileContent`), so that listing files never reads them."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_team_created", "team_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "file-" + hex
    team_id: Mapped[str] = mapped_column(String(40))
    purpose: Mapped[str] = mapped_column(String(32))  # batch, batch_output, batch_errors
    filename: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class FileContent(Base):
    __tablename__ = "file_contents"

    file_id: Mapped[str] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class BatchJob(Base):
    """A job of the Batch API: a batch pinned to one deployment, run by whichever gateway process
    holds its lease; `fencing_token` grows with every claim, so a process that lost the lease can
    no longer write."""

    __tablename__ = "batch_jobs"
    __table_args__ = (
        Index("ix_batch_jobs_team_created", "team_id", "created_at"),
        Index("ix_batch_jobs_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "batch_" + hex
    team_id: Mapped[str] = mapped_column(String(40))
    key_id: Mapped[str] = mapped_column(String(40))
    endpoint: Mapped[str] = mapped_column(String(40))  # "/v1/chat/completions"
    input_file_id: Mapped[str] = mapped_column(String(40))
    output_file_id: Mapped[str | None] = mapped_column(String(40), default=None)
    error_file_id: Mapped[str | None] = mapped_column(String(40), default=None)
    completion_window: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16))
    metadata_: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, default=None)
    model: Mapped[str | None] = mapped_column(String(200), default=None)  # the one model of its lines
    directives: Mapped[dict[str, str] | None] = mapped_column(JSON, default=None)  # region, provider
    deployment: Mapped[str | None] = mapped_column(String(400), default=None)  # the pin, once placed
    errors: Mapped[list[dict[str, object]] | None] = mapped_column(JSON, default=None)
    request_total: Mapped[int] = mapped_column(Integer, default=0)
    request_completed: Mapped[int] = mapped_column(Integer, default=0)
    request_failed: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # created + the window
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    paused_reason: Mapped[str | None] = mapped_column(String(200), default=None)  # a failing pin
    lease_owner: Mapped[str | None] = mapped_column(String(200), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    fencing_token: Mapped[int] = mapped_column(BigInteger, default=0)
    # the provider's batch in flight, for a job its provider's batch API runs (None: none)
    provider_batch_id: Mapped[str | None] = mapped_column(String(200), default=None)
    # the rule, lane and quote of a job placed by `metadata.gateway_placement` (gateway.jobs.placement)
    placement: Mapped[dict[str, object] | None] = mapped_column(JSON, default=None)


class BatchLine(Base):
    """One line of a job: its request, and once it has one, its outcome (the ledger). An outcome is
    written once, with the fencing token of the claim that ran it; the line's usage record is
    written in the same transaction, so the job's counts never run ahead of stored outcomes."""

    __tablename__ = "batch_lines"
    __table_args__ = (Index("ix_batch_lines_job_state", "job_id", "state"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("batch_jobs.id", ondelete="CASCADE"), primary_key=True)
    line_no: Mapped[int] = mapped_column(Integer, primary_key=True)  # from 0, in the input's order
    custom_id: Mapped[str] = mapped_column(String(512))
    body: Mapped[str] = mapped_column(Text)  # the request body as JSON text
    prefix_key: Mapped[str] = mapped_column(String(64))  # lines sharing a prompt prefix run together
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending, succeeded, failed
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    response: Mapped[str | None] = mapped_column(Text, default=None)  # the output line's body, as JSON
    error: Mapped[str | None] = mapped_column(Text, default=None)  # the error line's error, as JSON
    request_id: Mapped[str | None] = mapped_column(String(64), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    fencing_token: Mapped[int | None] = mapped_column(BigInteger, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    # The line's runs (migration 0009): each send is written down before it goes out, so that a
    # process that dies with it in flight leaves a record to make, not a gap. `runs` names the next
    # run's request id; `failures` counts the sends that broke (gateway.jobs.runner.MAX_LINE_FAILURES).
    runs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    attempt_request_id: Mapped[str | None] = mapped_column(String(64), default=None)  # the run in flight
    attempt_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    attempt_deployment: Mapped[str | None] = mapped_column(String(400), default=None)  # where it went
