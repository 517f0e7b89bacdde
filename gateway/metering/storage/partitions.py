"""usage_records' monthly partitions on PostgreSQL (migration 0008): the current month and some
ahead, created before records arrive for them, by the usage writer at start and then daily
(`UsageWriter`) or by `gateway usage partitions`.

Idempotent and safe to run from several processes at once: one transaction-scoped advisory lock
makes them take turns, and each creates only the months not yet there. A month is created apart
and then attached, which locks usage_records only against other DDL (SHARE UPDATE EXCLUSIVE),
not against the writer's inserts or the reports. Records that reached the DEFAULT partition for
a month not yet created (a gateway clock off by months) are moved into it as it is attached.
On SQLite (one plain table) there is nothing to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

# Any constant shared by every gateway process; "usage partitions" in ASCII, cut to 8 bytes.
PARTITION_LOCK_KEY = 0x7573_6167_6570_6172
DEFAULT_PARTITION = "usage_records_default"
# DDL waits this long for a lock (a long report on the default partition) before giving up until
# the next run, instead of queueing the writer's inserts behind it.
LOCK_TIMEOUT = "10s"
_MONTH_NAME = re.compile(r"^usage_records_(\d{4})_(\d{2})$")


@dataclass(frozen=True, slots=True)
class MonthPartition:
    """One month's partition: records from `month`'s first day (UTC) to the next month's."""

    month: date  # the first day of the month

    @property
    def name(self) -> str:
        return f"usage_records_{self.month:%Y_%m}"

    @property
    def start(self) -> datetime:
        return datetime.combine(self.month, datetime.min.time(), UTC)

    @property
    def end(self) -> datetime:
        return datetime.combine(add_months(self.month, 1), datetime.min.time(), UTC)


def month_of(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


async def is_partitioned(session: AsyncSession) -> bool:
    """usage_records is a partitioned table (PostgreSQL past migration 0008)."""
    if session.get_bind().dialect.name != "postgresql":
        return False
    found = await session.scalar(
        text(
            "SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
            "WHERE c.oid = to_regclass('usage_records')"
        )
    )
    return found is not None


async def month_partitions(session: AsyncSession) -> list[MonthPartition]:
    """The month partitions attached to usage_records, oldest first (not the DEFAULT one)."""
    names = await session.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass('usage_records')"
        )
    )
    months = []
    for name in names:
        matched = _MONTH_NAME.match(name)
        if matched:
            months.append(MonthPartition(date(int(matched[1]), int(matched[2]), 1)))
    return sorted(months, key=lambda partition: partition.month)


async def take_upkeep_lock(session: AsyncSession) -> None:
    """Until this transaction ends: one upkeep at a time, across every process."""
    await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PARTITION_LOCK_KEY})
    await session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))


async def ensure_partitions(session: AsyncSession, now: datetime, ahead: int) -> list[str]:
    """Create the partitions of `now`'s month and the `ahead` months after it that are missing;
    the names created. The caller commits."""
    current = month_of(now)
    return await create_months(session, [add_months(current, offset) for offset in range(ahead + 1)])


async def create_months(session: AsyncSession, months: Iterable[date]) -> list[str]:
    """Create the partitions of these months (first days) that are missing; the names created.
    The caller commits."""
    if not await is_partitioned(session):
        return []
    await take_upkeep_lock(session)
    existing = {partition.month for partition in await month_partitions(session)}
    created = []
    for month in sorted(set(months)):
        partition = MonthPartition(month)
        if partition.month not in existing:
            await _create(session, partition)
            created.append(partition.name)
    return created


async def _create(session: AsyncSession, partition: MonthPartition) -> None:
    bounds = {"start": partition.start, "end": partition.end}
    await session.execute(text(f"CREATE TABLE {partition.name} (LIKE usage_records INCLUDING DEFAULTS)"))
    # Held to the commit: no record can reach the DEFAULT partition for this month between the
    # move and the attach (which would then refuse). Inserts routed to other months go on.
    await session.execute(text(f"LOCK TABLE {DEFAULT_PARTITION} IN SHARE ROW EXCLUSIVE MODE"))
    # Straight from partition to table: neither statement names usage_records, so its usage_daily
    # triggers do not fire, and the daily totals (which count these records already) stay right.
    await session.execute(
        text(
            f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} "  # noqa: S608 - names of our own
            "WHERE created_at >= :start AND created_at < :end RETURNING *) "
            f"INSERT INTO {partition.name} SELECT * FROM moved"
        ),
        bounds,
    )
    # The bounds as literals: DDL takes no parameters (they are our own datetimes, not input).
    await session.execute(
        text(
            f"ALTER TABLE usage_records ATTACH PARTITION {partition.name} "
            f"FOR VALUES FROM ('{partition.start.isoformat()}') TO ('{partition.end.isoformat()}')"
        )
    )
