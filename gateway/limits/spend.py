"""Month-to-date spend per key and team, in whole units of 1e-10 USD, and the budget rule.

Units match `usage_records.cost` (NUMERIC(20, 10)), so a counter is exactly the sum of the
records' costs; integer arithmetic (Redis INCRBY) keeps it so, where floats (INCRBYFLOAT) would
drift. Months are calendar months in UTC, named like `2026-11`. A request is admitted only if
its reservation fits what is left of each budget once the reservations in flight are counted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Literal

from gateway.auth.principal import Principal
from gateway.errors import RateLimited
from gateway.limits.headers import budget_held, quota_exceeded, request_over_budget
from gateway.limits.windows import Scope

MONEY_SCALE = 10
SPEND_TTL_S = 35 * 86_400  # a counter outlives its month by a few days, then goes
# No one request costs more: a settle beyond it comes from an absurd count and is cut to it, so
# that the 64-bit counters never overflow.
MAX_REQUEST_UNITS = 10**16  # 1,000,000 USD
# Budgets above this compare as this, which keeps every counter inside Redis's 64-bit integers.
MAX_BUDGET_UNITS = 2**62

Shortfall = Literal["spent", "over_budget", "held"]


def to_units(amount: Decimal) -> int:
    """USD -> whole 1e-10 USD, rounded half up as PostgreSQL rounds into NUMERIC(20, 10)."""
    return int(amount.scaleb(MONEY_SCALE).to_integral_value(ROUND_HALF_UP))


def units_at_most(amount: Decimal) -> int:
    """USD -> whole 1e-10 USD rounded up (a reservation never holds less than the price)."""
    return int(amount.scaleb(MONEY_SCALE).to_integral_value(ROUND_CEILING))


def settled_units(cost: Decimal) -> int:
    """What a metered cost adds to the counters: never less than nothing, never absurdly much."""
    return min(max(to_units(cost), 0), MAX_REQUEST_UNITS)


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


def team_tag(team: str) -> str:
    """The hash tag of every counter and window of a team and its keys: one Cluster slot, so that
    the one script of an admission or a settle may touch a key's and its team's together."""
    return f"gw:{{team:{team}}}"


def spend_key(scope: Scope, owner: str, month: str, team: str | None = None) -> str:
    """`gw:{team:<team>}:spend:<scope>:<owner>:<YYYY-MM>`; `team`: a key's team (a team is its own)."""
    if team is None:
        if scope == "key":
            raise ValueError("a key's spend counter is named with its team")
        team = owner
    return f"{team_tag(team)}:spend:{scope}:{owner}:{month}"


@dataclass(frozen=True, slots=True)
class MonthSpend:
    """What the usage records say each team and key spent in one month, in units."""

    month: str
    teams: dict[str, int] = field(default_factory=dict)
    keys: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, key) -> units

    def counters(self) -> dict[str, int]:
        """Spend counter name -> units, for every team and key that spent anything."""
        named = {spend_key("team", team, self.month): units for team, units in self.teams.items()}
        keys = self.keys.items()
        return named | {spend_key("key", key, self.month, team): units for (team, key), units in keys}


@dataclass(frozen=True, slots=True)
class Budget:
    """One monthly budget that binds a request: its key's or its team's."""

    scope: Scope
    owner: str
    month: str
    usd: Decimal
    team: str  # the owner's team (a team's own id)

    @property
    def counter(self) -> str:
        return spend_key(self.scope, self.owner, self.month, self.team)

    @property
    def units(self) -> int:
        return min(to_units(self.usd), MAX_BUDGET_UNITS)


def budgets_of(principal: Principal, month: str) -> list[Budget]:
    """The budgets that bind a principal this month, the key's before the team's."""
    budgets = []
    if principal.key_budget_usd is not None:
        budgets.append(Budget("key", principal.key_id, month, principal.key_budget_usd, principal.team_id))
    if principal.team_budget_usd is not None:
        budgets.append(Budget("team", principal.team_id, month, principal.team_budget_usd, principal.team_id))
    return budgets


def shortfall(budget_units: int, spent: int, held: int, cost: int) -> Shortfall | None:
    """Why a request reserving `cost` does not fit a budget, or None when it does.

    `spent` is settled, `held` reserved by requests in flight. A budget reached (spent >= budget)
    refuses even a request reserving nothing; otherwise the reservation must fit what is left."""
    spent, held = max(spent, 0), max(held, 0)  # counters written before settles were clamped
    if spent >= budget_units:
        return "spent"
    if spent + cost > budget_units:
        return "over_budget"
    if spent + held + cost > budget_units:
        return "held"
    return None


def budget_refusal(
    budget: Budget, why: Shortfall, spent: int, held: int, cost: int, now: float
) -> RateLimited:
    """The 429 for a request refused by `budget` (QuotaExceeded unless in-flight holds are why)."""
    _, month_end = month_bounds(now)
    seconds_left = month_end.timestamp() - now
    if why == "held":
        return budget_held(budget.scope, budget.owner, budget.usd, from_units(max(held, 0)))
    if why == "over_budget":
        left = from_units(budget.units - max(spent, 0))
        return request_over_budget(
            budget.scope, budget.owner, budget.usd, from_units(cost), left, budget.month, seconds_left
        )
    return quota_exceeded(budget.scope, budget.owner, budget.usd, budget.month, seconds_left)
