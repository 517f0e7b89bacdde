"""Recover month-to-date spend from `usage_records`, e.g. on a cold Redis or a restarted process.

The records lag behind the counters (they are written in bulk, off the request path), so
reconciling only ever raises a counter to what the records say: a cold counter is restored, a
warm one is left alone.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Integer, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from gateway.db.models import UsageRecord
from gateway.limits.limiter import Limiter
from gateway.limits.spend import MONEY_SCALE, MonthSpend, month_bounds, month_of, to_units


def _cost_sum(dialect: str) -> ColumnElement[Any]:
    if dialect == "sqlite":  # NUMERIC is a double there: round each row to whole units, sum integers
        return func.sum(cast(func.round(UsageRecord.cost * 10**MONEY_SCALE), Integer))
    return func.sum(UsageRecord.cost)


def _units(value: Any, dialect: str) -> int:
    return int(value) if dialect == "sqlite" else to_units(Decimal(value))


async def load_month_spend(session: AsyncSession, now: float) -> MonthSpend:
    """Each team's and key's spend in the UTC calendar month holding `now`, from the records."""
    dialect = session.get_bind().dialect.name
    start, end = month_bounds(now)
    in_month = (UsageRecord.created_at >= start, UsageRecord.created_at < end)
    totals: dict[str, dict[str, int]] = {}
    for column in (UsageRecord.team_id, UsageRecord.key_id):
        rows = await session.execute(select(column, _cost_sum(dialect)).where(*in_month).group_by(column))
        totals[column.key] = {owner: _units(cost, dialect) for owner, cost in rows if cost is not None}
    return MonthSpend(month_of(now), teams=totals["team_id"], keys=totals["key_id"])


async def reconcile(limiter: Limiter, sessions: async_sessionmaker[AsyncSession], now: float) -> MonthSpend:
    """Set the limiter's month counters from the records (run at start-up); returns what was read."""
    async with sessions() as session:
        spend = await load_month_spend(session, now)
    await limiter.reconcile(spend)
    return spend
