"""Month-to-date spend per key and team, in whole units of 1e-10 USD, and the budget rule.

Units match `usage_records.cost` (NUMERIC(20, 10)), so a counter is exactly the sum of the
records' costs; integer arithmetic (Redis INCRBY) keeps it so, where floats (INCRBYFLOAT) would
drift. Months are calendar months in UTC, named like `2026-11`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from gateway.auth.principal import Principal
from gateway.errors import QuotaExceeded
from gateway.limits.headers import quota_exceeded
from gateway.limits.windows import Scope

MONEY_SCALE = 10
SPEND_TTL_S = 35 * 86_400  # a counter outlives its month by a few days, then goes


def to_units(amount: Decimal) -> int:
    """USD -> whole 1e-10 USD, rounded half up as PostgreSQL rounds into NUMERIC(20, 10)."""
    return int(amount.scaleb(MONEY_SCALE).to_integral_value(ROUND_HALF_UP))


def from_units(units: int) -> Decimal:
    return Decimal(units).scaleb(-MONEY_SCALE)


def month_of(now: float) -> str:
    return _month_of_hour(int(now // 3600))  # months change on UTC hour boundaries


@functools.lru_cache(maxsize=8)
def _month_of_hour(hour: int) -> str:
    """Cached: asked on every admission, and the answer changes once a month."""
    return datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m")


def month_bounds(now: float) -> tuple[datetime, datetime]:
    """The UTC calendar month holding `now`: start inclusive, end exclusive."""
    moment = datetime.fromtimestamp(now, UTC)
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


def spend_key(scope: Scope, owner: str, month: str) -> str:
    return f"gw:spend:{scope}:{owner}:{month}"


@dataclass(frozen=True, slots=True)
class MonthSpend:
    """What the usage records say each team and key spent in one month, in units."""

    month: str
    teams: dict[str, int] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)

    def counters(self) -> dict[str, int]:
        """Spend counter name -> units, for every team and key that spent anything."""
        named = {spend_key("team", team, self.month): units for team, units in self.teams.items()}
        return named | {spend_key("key", key, self.month): units for key, units in self.keys.items()}


def budget_refusal(principal: Principal, key_units: int, team_units: int, now: float) -> QuotaExceeded | None:
    """QuotaExceeded once the key's or the team's spend this month reached its budget, else None."""
    _, month_end = month_bounds(now)
    seconds_left = month_end.timestamp() - now
    month = month_of(now)
    if principal.key_budget_usd is not None and key_units >= to_units(principal.key_budget_usd):
        return quota_exceeded("key", principal.key_id, principal.key_budget_usd, month, seconds_left)
    if principal.team_budget_usd is not None and team_units >= to_units(principal.team_budget_usd):
        return quota_exceeded("team", principal.team_id, principal.team_budget_usd, month, seconds_left)
    return None
