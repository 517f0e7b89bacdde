"""The database side of a reconciliation: the gateway's own day of a provider, read from the usage
records, and each day's findings, stored (`usage_reconciliations`) and read back for the console,
/metrics and the CLI."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import UsageReconciliation, UsageRecord
from gateway.reconciliation.comparison import Finding, Ledger, Measure, Tokens, tier_name
from gateway.reconciliation.reports import day_bounds

# Records the completions and messages reports leave out: embeddings have a report of their own,
# which is not read; a token count is free.
UNREPORTED_ENDPOINTS = ("embeddings", "messages/count_tokens")


async def gateway_ledger(session: AsyncSession, provider: str, day: date) -> Ledger:
    """The records' totals of `day` (UTC, by arrival) for `provider`, per upstream model and tier,
    of the endpoints the providers' reports cover."""
    start, end = day_bounds(day)
    record = UsageRecord
    rows = await session.execute(
        select(
            record.upstream_model,
            record.service_tier,
            func.coalesce(func.sum(record.prompt_tokens), 0),
            func.coalesce(func.sum(record.cached_tokens), 0),
            func.coalesce(func.sum(record.completion_tokens), 0),
            func.coalesce(func.sum(record.cost), 0),
        )
        .where(record.provider == provider, record.created_at >= start, record.created_at < end)
        .where(record.endpoint.not_in(UNREPORTED_ENDPOINTS))
        .group_by(record.upstream_model, record.service_tier)
    )
    ledger = Ledger()
    for model, tier, prompt, cached, completion, cost in rows:
        ledger.add_tokens(model, tier_name(tier), Tokens(int(prompt), int(cached), int(completion)))
        ledger.add_cost(model, tier_name(tier), cost)
    return ledger


async def save_day(
    session: AsyncSession, day: date, provider: str, findings: list[Finding], checked_at: datetime
) -> None:
    """The day's findings for the provider, in place of any stored before. The caller commits."""
    table = UsageReconciliation
    await session.execute(delete(table).where(table.day == day, table.provider == provider))
    session.add_all(
        UsageReconciliation(
            day=f.day,
            provider=f.provider,
            model=f.model,
            tier=f.tier,
            measure=f.measure.value,
            gateway=f.gateway,
            reported=f.reported,
            difference=f.difference,
            share=f.share,
            exceeded=f.exceeded,
            checked_at=checked_at,
        )
        for f in findings
    )
    await session.flush()


async def reconciled_days(session: AsyncSession, since: date) -> set[tuple[date, str]]:
    """The (day, provider) pairs stored from `since` on."""
    table = UsageReconciliation
    rows = await session.execute(select(table.day, table.provider).where(table.day >= since).distinct())
    return {(day, provider) for day, provider in rows}


async def recent_findings(
    session: AsyncSession, since: date, provider: str | None = None
) -> list[UsageReconciliation]:
    """Stored findings from `since` on: newest day first, then by provider, model, tier and measure."""
    table = UsageReconciliation
    query = select(table).where(table.day >= since)
    if provider is not None:
        query = query.where(table.provider == provider)
    order = (table.day.desc(), table.provider, table.model, table.tier, table.measure)
    return list((await session.scalars(query.order_by(*order))).all())


async def latest_findings(session: AsyncSession) -> list[UsageReconciliation]:
    """Each provider's most recent reconciled day: what /metrics shows."""
    table = UsageReconciliation
    latest = select(table.provider, func.max(table.day).label("day")).group_by(table.provider).subquery()
    query = select(table).join(latest, (table.provider == latest.c.provider) & (table.day == latest.c.day))
    return list((await session.scalars(query)).all())


def finding_of(row: UsageReconciliation) -> Finding:
    return Finding(
        row.day,
        row.provider,
        row.model,
        row.tier,
        Measure(row.measure),
        row.gateway,
        row.reported,
        row.difference,
        row.share,
        row.exceeded,
    )
