"""Running a reconciliation: one provider's day (`reconcile_provider`, what `gateway usage
reconcile` and the daily run call), and the daily run itself (`reconcile_daily`), a task of every
serving process of which one at a time does the work.

The daily run wakes every `TICK_S`: under a transaction-scoped advisory lock that only one process
gets (the others skip that tick), it reconciles each day of the last `lookback_days` that ended at
least `delay_h` ago and is not stored yet, for each provider with an admin key; a provider whose
report cannot be read is logged and tried again at a later tick. Then every process shows each
provider's latest stored day in its /metrics gauges.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import httpx
import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.session import database_error
from gateway.metrics.instruments import Metrics
from gateway.reconciliation.comparison import Finding, compare, exceeded
from gateway.reconciliation.records import (
    finding_of,
    gateway_ledger,
    latest_findings,
    reconciled_days,
    save_day,
)
from gateway.reconciliation.reports import ProviderReportError, reconcilable, reports_of
from gateway.settings import Catalog, Provider

TICK_S = 900.0
RECONCILE_LOCK_KEY = 0x72_65_63_6F_6E  # "recon": one daily run at a time, across every process
REPORT_TIMEOUT_S = 60.0

Logger = structlog.typing.FilteringBoundLogger


def known_models(catalog: Catalog, provider: str) -> set[str]:
    """The provider's model names as the catalog's deployments send them (the records' upstream model)."""
    return {d.model for model in catalog.models for d in model.deployments if d.provider == provider}


async def reconcile_provider(
    session: AsyncSession,
    catalog: Catalog,
    provider: Provider,
    day: date,
    http: httpx.AsyncClient,
    log: Logger,
    now: datetime | None = None,
) -> list[Finding]:
    """Compare the provider's reports of `day` with the records, store the findings (in place of
    any of that day) and log a warning for each past the threshold. ProviderReportError when a
    report cannot be read (nothing is stored then). The caller commits."""
    ours = await gateway_ledger(session, provider.name, day)
    models = ours.models() | known_models(catalog, provider.name)
    theirs = await reports_of(provider, http).day(day, models)
    findings = compare(day, provider.name, ours, theirs, catalog.reconciliation.threshold)
    await save_day(session, day, provider.name, findings, now or datetime.now(UTC))
    for finding in exceeded(findings):
        log.warning(
            "reconciliation_difference",
            provider=provider.name,
            day=day.isoformat(),
            model=finding.model,
            tier=finding.tier,
            measure=finding.measure.value,
            gateway=str(finding.gateway),
            reported=str(finding.reported),
            difference=str(finding.difference),
            share=round(finding.share, 6),
            threshold=catalog.reconciliation.threshold,
        )
    log.info(
        "reconciliation_done",
        provider=provider.name,
        day=day.isoformat(),
        findings=len(findings),
        exceeded=len(exceeded(findings)),
    )
    return findings


def due_days(now: datetime, delay_h: float, lookback_days: int) -> list[date]:
    """The days of the last `lookback_days` that ended at least `delay_h` hours before `now`, oldest first."""
    today = now.astimezone(UTC).date()
    days = [today - timedelta(days=back) for back in range(lookback_days, 0, -1)]
    settled = now - timedelta(hours=delay_h)
    return [
        day for day in days if datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC) <= settled
    ]


async def _take_lock(session: AsyncSession) -> bool:
    """Whether this transaction holds the daily run's lock (always, on SQLite: one process)."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    held = await session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": RECONCILE_LOCK_KEY})
    return bool(held)


async def reconcile_due(
    sessions: async_sessionmaker[AsyncSession],
    catalog: Catalog,
    http: httpx.AsyncClient,
    log: Logger,
    now: datetime,
) -> int:
    """Reconcile every due day not stored yet, provider by provider, if no other process is at it;
    the number of (day, provider) stored."""
    providers = [p for p in catalog.providers if reconcilable(p)]
    days = due_days(now, catalog.reconciliation.delay_h, catalog.reconciliation.lookback_days)
    if not providers or not days:
        return 0
    stored = 0
    async with sessions.begin() as session:
        if not await _take_lock(session):
            return 0
        done = await reconciled_days(session, days[0])
        for day in days:
            for provider in providers:
                if (day, provider.name) in done:
                    continue
                try:
                    async with session.begin_nested():  # a failed provider leaves the others' days
                        await reconcile_provider(session, catalog, provider, day, http, log, now)
                    stored += 1
                except ProviderReportError as exc:
                    log.warning(
                        "reconciliation_report_unavailable",
                        provider=provider.name,
                        day=day.isoformat(),
                        error=str(exc),
                    )
    return stored


async def show_latest(sessions: async_sessionmaker[AsyncSession], metrics: Metrics) -> None:
    """Each provider's latest stored day into the /metrics gauges."""
    async with sessions() as session:
        rows = await latest_findings(session)
    metrics.show_reconciliation([finding_of(row) for row in rows])


async def reconcile_daily(
    sessions: async_sessionmaker[AsyncSession],
    catalog: Catalog,
    metrics: Metrics,
    log: Logger,
    tick_s: float = TICK_S,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """`reconcile_due` and `show_latest` now and every `tick_s` until cancelled; a failure is logged
    and the next tick tries again."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(REPORT_TIMEOUT_S)) as http:
        while True:
            try:
                await reconcile_due(sessions, catalog, http, log, clock())
                await show_latest(sessions, metrics)
            except Exception as exc:  # the database away: the next tick tries again
                log.warning("reconciliation_failed", error=database_error(exc) or type(exc).__name__)
            await asyncio.sleep(tick_s)
