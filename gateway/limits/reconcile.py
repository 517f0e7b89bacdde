"""Recover month-to-date spend from `usage_records`: every counter at start-up (`reconcile`), one
team's or key's when admission finds its counter missing (`RecordedSpend`, see rebuild.py).

The records lag behind the counters (they are written in bulk, off the request path), so
reconciling only ever raises a counter to what the records say: a cold counter is restored, a
warm one is left alone.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Integer, cast, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from gateway.db.models import UsageRecord
from gateway.errors import ServiceUnavailable
from gateway.limits.limiter import Limiter
from gateway.limits.spend import MONEY_SCALE, MonthSpend, month_bounds, month_of, to_units
from gateway.limits.windows import Scope


def _cost_sum(dialect: str) -> ColumnElement[Any]:
    if dialect == "sqlite":  # NUMERIC is a double there: round each row to whole units, sum integers
        return func.sum(cast(func.round(UsageRecord.cost * 10**MONEY_SCALE), Integer))
    return func.sum(UsageRecord.cost)


def _units(value: Any, dialect: str) -> int:
    return int(value) if dialect == "sqlite" else to_units(Decimal(value))


def _in_month(now: float) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    start, end = month_bounds(now)
    return UsageRecord.created_at >= start, UsageRecord.created_at < end


async def load_month_spend(session: AsyncSession, now: float) -> MonthSpend:
    """Each team's and key's spend in the UTC calendar month holding `now`, from the records."""
    dialect = session.get_bind().dialect.name
    team, key, cost = UsageRecord.team_id, UsageRecord.key_id, _cost_sum(dialect)
    teams = await session.execute(select(team, cost).where(*_in_month(now)).group_by(team))
    keys = await session.execute(select(team, key, cost).where(*_in_month(now)).group_by(team, key))
    return MonthSpend(
        month_of(now),
        teams={owner: _units(units, dialect) for owner, units in teams if units is not None},
        # by team too: a key's counter is named with its team (spend.team_tag)
        keys={(owner, k): _units(units, dialect) for owner, k, units in keys if units is not None},
    )


async def reconcile(limiter: Limiter, sessions: async_sessionmaker[AsyncSession], now: float) -> MonthSpend:
    """Set the limiter's month counters from the records (run at start-up); returns what was read."""
    async with sessions() as session:
        spend = await load_month_spend(session, now)
    await limiter.reconcile(spend)
    return spend


class RecordedSpend:
    """One team's or key's month spend from the records (`SpendRecords`, for SpendRebuilds)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def month_units(self, scope: Scope, owner: str, now: float) -> int:
        column = UsageRecord.team_id if scope == "team" else UsageRecord.key_id
        try:
            async with self._sessions() as session:
                dialect = session.get_bind().dialect.name
                total = await session.scalar(
                    select(_cost_sum(dialect)).where(column == owner, *_in_month(now))
                )
        except (SQLAlchemyError, OSError) as exc:
            raise ServiceUnavailable(
                f"Budgets cannot be checked right now: the month's spend of {scope} {owner} must be rebuilt "
                "from the usage records and the gateway's database is unreachable. Retry shortly.",
                headers={"retry-after": "1"},
            ) from exc
        return 0 if total is None else max(_units(total, dialect), 0)
