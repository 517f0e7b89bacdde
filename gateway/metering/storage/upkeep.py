"""The usage tables' upkeep: month partitions created ahead, then expired ones dropped under the
retention setting (`partitions`, `retention`). Run by every usage writer at start and daily, and by
`gateway usage partitions`; a no-op on SQLite."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.session import database_error
from gateway.metering.storage.partitions import ensure_partitions
from gateway.metering.storage.retention import drop_expired_months

UPKEEP_INTERVAL_S = 24 * 3600.0
RETRY_S = 300.0  # after a failure (the database away, a lock not had in time)


@dataclass(frozen=True, slots=True)
class UsageUpkeep:
    """How far ahead to create month partitions, and how many whole months of records to keep
    before the current one (None: forever)."""

    months_ahead: int = 3
    retention_months: int | None = None


@dataclass(frozen=True, slots=True)
class UpkeepResult:
    created: list[str]
    dropped: list[str]


async def keep_usage_storage(
    sessions: async_sessionmaker[AsyncSession],
    upkeep: UsageUpkeep,
    now: datetime | None = None,
    log: structlog.typing.FilteringBoundLogger | None = None,
) -> UpkeepResult:
    """Create what is missing, then drop what has expired: one transaction each, so a failed drop
    leaves the new months in place."""
    log = log or structlog.get_logger("gateway.metering")
    now = now or datetime.now(UTC)
    async with sessions.begin() as session:
        created = await ensure_partitions(session, now, upkeep.months_ahead)
    if created:
        log.info("usage_partitions_created", partitions=created)
    dropped: list[str] = []
    if upkeep.retention_months is not None:
        async with sessions.begin() as session:
            dropped = await drop_expired_months(session, now, upkeep.retention_months, log)
    return UpkeepResult(created, dropped)


async def keep_usage_storage_daily(
    sessions: async_sessionmaker[AsyncSession],
    upkeep: UsageUpkeep,
    log: structlog.typing.FilteringBoundLogger,
    interval_s: float = UPKEEP_INTERVAL_S,
) -> None:
    """`keep_usage_storage` now and every `interval_s` until cancelled; a failure is logged and
    tried again sooner (the DEFAULT partition takes the records meanwhile)."""
    while True:
        try:
            await keep_usage_storage(sessions, upkeep, log=log)
            delay = interval_s
        except Exception as exc:
            log.warning("usage_upkeep_failed", error=database_error(exc) or type(exc).__name__)
            delay = min(RETRY_S, interval_s)
        await asyncio.sleep(delay)
