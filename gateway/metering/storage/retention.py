"""Usage retention on PostgreSQL: drop the month partitions of usage_records entirely older than
`GATEWAY_USAGE_RETENTION_MONTHS` whole months before the current one, once usage_daily is seen
to hold the same totals for their days; and `records_from`, where the records now begin.

What is kept after a drop: usage_daily's totals per UTC day and (team, key, model, provider,
region, batch), so whole-day reports over the dropped range are what they were. What is gone:
the records themselves (the event listing, parts of a day, latency, status). The months go
oldest first and stop at the first that does not add up, so the records always begin at one
moment, kept in usage_retention for the reports (`records_from`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import structlog
from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import UsageRetention
from gateway.errors import InvalidRequest
from gateway.metering.storage.partitions import (
    MonthPartition,
    add_months,
    is_partitioned,
    month_of,
    month_partitions,
    take_upkeep_lock,
)


@dataclass(frozen=True, slots=True)
class MonthTotals:
    requests: int
    tokens: int
    cost_units: Decimal


async def drop_expired_months(
    session: AsyncSession,
    now: datetime,
    retention_months: int,
    log: structlog.typing.FilteringBoundLogger,
) -> list[str]:
    """Drop the month partitions whose every record is older than `retention_months` whole months
    before `now`'s month and whose totals usage_daily holds; the names dropped. The caller commits."""
    if not await is_partitioned(session):
        return []
    await take_upkeep_lock(session)
    cutoff = add_months(month_of(now), -retention_months)
    dropped: list[str] = []
    for partition in await month_partitions(session):
        if partition.end.date() > cutoff:
            break
        records = await _record_totals(session, partition)
        daily = await _daily_totals(session, partition)
        if records != daily:
            log.warning(
                "usage_partition_kept",
                partition=partition.name,
                reason="usage_daily does not add up to its records",
                records=records.requests,
                daily_records=daily.requests,
            )
            break
        # Detached, then dropped: neither fires usage_records' DELETE trigger, so usage_daily keeps
        # these days.
        await session.execute(text(f"ALTER TABLE usage_records DETACH PARTITION {partition.name}"))
        await session.execute(text(f"DROP TABLE {partition.name}"))
        await _records_begin_at(session, partition.end)
        log.info("usage_partition_dropped", partition=partition.name, records=records.requests)
        dropped.append(partition.name)
    return dropped


async def records_from(session: AsyncSession) -> datetime | None:
    """Where the usage records begin since retention dropped older ones; None: all are kept."""
    return await session.scalar(select(func.max(UsageRetention.records_from)))


async def check_records_kept(session: AsyncSession, moment: datetime, param: str) -> None:
    """A 400 naming `param` if the records from `moment` on are not all kept any more: a report
    must not show the zeros of records that retention dropped."""
    kept_from = await records_from(session)
    if kept_from is None:
        return
    kept_from = kept_from.replace(tzinfo=UTC) if kept_from.tzinfo is None else kept_from.astimezone(UTC)
    if moment < kept_from:
        raise InvalidRequest(
            f"usage records before {kept_from.isoformat()} are no longer kept (retention): before "
            "then only whole UTC days are, so start and end such a range at midnight UTC",
            param=param,
        )


async def _records_begin_at(session: AsyncSession, moment: datetime) -> None:
    await session.execute(delete(UsageRetention))
    await session.execute(insert(UsageRetention).values(records_from=moment))


async def _record_totals(session: AsyncSession, partition: MonthPartition) -> MonthTotals:
    """The month's records (money in usage_daily's units of 1e-10 USD), from usage_records as a
    whole: a stray record of the month in the DEFAULT partition is in usage_daily too (it stays
    when the month's partition goes)."""
    row = (
        await session.execute(
            text(
                "SELECT count(*), coalesce(sum(prompt_tokens + completion_tokens + cached_tokens "
                "+ cache_write_tokens), 0), coalesce(sum(cost), 0) * 10000000000 FROM usage_records "
                "WHERE created_at >= :start AND created_at < :end"
            ),
            {"start": partition.start, "end": partition.end},
        )
    ).one()
    return MonthTotals(int(row[0]), int(row[1]), Decimal(row[2]))


async def _daily_totals(session: AsyncSession, partition: MonthPartition) -> MonthTotals:
    row = (
        await session.execute(
            text(
                "SELECT coalesce(sum(requests), 0), coalesce(sum(prompt_tokens + completion_tokens "
                "+ cached_tokens + cache_write_tokens), 0), coalesce(sum(cost_units), 0) "
                "FROM usage_daily WHERE day >= :start AND day < :end"
            ),
            {"start": partition.start.date(), "end": partition.end.date()},
        )
    ).one()
    return MonthTotals(int(row[0]), int(row[1]), Decimal(row[2]))
