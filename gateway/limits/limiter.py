"""The Limiter: admit a request against its budgets and rate windows, settle it once metered.

`MemoryLimiter` is the embedded single-process default; `RedisLimiter` (redis_limiter.py) holds
the same state in Redis so that every gateway process agrees. Both follow the same rules:
budgets first (the request's reservation must fit what is left once the reservations in flight
are counted: QuotaExceeded, or RateLimited while only those holds are in the way), then every rate
window at once (RateLimited; nothing is charged unless all windows fit). Admission charges the
reservation's tokens to the token windows and holds its cost against the budgets; `settle`
replaces both by the request's real figures, `release` gives them back when no upstream was
reached. A budget's counter is trusted only once seeded from the usage records (rebuild.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from gateway.auth.principal import Principal
from gateway.limits.headers import rate_limit_headers, rate_limited
from gateway.limits.holds import HOLD_TTL_S, Hold, LocalHolds, new_hold_id
from gateway.limits.rebuild import SpendRebuilds, SpendRecords
from gateway.limits.reservation import Reservation
from gateway.limits.spend import (
    Budget,
    MonthSpend,
    budget_refusal,
    budgets_of,
    from_units,
    month_of,
    settled_units,
    shortfall,
    spend_key,
)
from gateway.limits.windows import Scope, Window, corrected_tat, cost_in, weigh, windows_for
from gateway.metering.events import UsageEvent

Clock = Callable[[], float]  # wall-clock unix seconds


@dataclass(frozen=True, slots=True)
class Admission:
    """A request let in: what it reserved, the budget hold, the x-ratelimit-* headers to answer with."""

    reservation: Reservation = field(default_factory=Reservation)
    headers: dict[str, str] = field(default_factory=dict)
    hold: Hold | None = None  # None when no budget binds (or the reservation costs nothing)


class Limiter(Protocol):
    async def admit(self, principal: Principal, reservation: Reservation) -> Admission:
        """Charge one request and its reservation, or raise RateLimited / QuotaExceeded
        (ServiceUnavailable when a missing counter cannot be rebuilt from the records)."""
        ...

    def settle(self, principal: Principal, event: UsageEvent, admission: Admission | None) -> Awaitable[None]:
        """After a metered request: its real tokens and cost replace what `admission` reserved.

        A Redis limiter queues its command before returning (see `ProxyService._meter`)."""
        ...

    async def release(self, principal: Principal, admission: Admission) -> None:
        """A request admitted but never sent upstream: give its reservation back."""
        ...

    async def reconcile(self, spend: MonthSpend) -> None:
        """Raise each month counter to at least what the usage records say (never lower one)."""
        ...

    async def spent_usd(self, scope: Scope, owner: str, month: str, team: str | None = None) -> Decimal:
        """A key's or team's spend counter for a month (`2026-11`); `team`: a key's team."""
        ...

    async def aclose(self) -> None:
        """Write what is held back (a graceful stop)."""
        ...


def used_tokens(event: UsageEvent) -> int:
    """What a request really used: OpenAI-format prompt tokens include cached and cache-write ones.

    Never negative, whatever an upstream reported."""
    return max(event.prompt_tokens, 0) + max(event.completion_tokens, 0)


def reserved_tokens(admission: Admission | None) -> int:
    return 0 if admission is None else admission.reservation.tokens


def token_windows(principal: Principal) -> list[Window]:
    if principal.key_tpm is None and principal.team_tpm is None:
        return []  # the common case, on every settle
    return [w for w in windows_for(principal) if w.kind == "tokens"]


def new_hold(budgets: list[Budget], reservation: Reservation, local: bool = False) -> Hold | None:
    if not budgets or reservation.units <= 0:
        return None
    return Hold(new_hold_id(), tuple(b.counter for b in budgets), reservation.units, local)


class MemoryLimiter:
    """Windows, month counters and holds in this process's memory (one process only)."""

    def __init__(
        self, clock: Clock = time.time, records: SpendRecords | None = None, hold_ttl_s: float = HOLD_TTL_S
    ) -> None:
        """`records`: where a counter not yet seeded is rebuilt from (None: every counter is trusted)."""
        self._clock = clock
        self._hold_ttl_s = hold_ttl_s
        self._tats: dict[Window, float] = {}
        self._spend: dict[str, int] = {}
        self._holds = LocalHolds()
        self._rebuilds = None if records is None else SpendRebuilds(records, self._seed)
        self._seeded: set[str] = set()
        self._month = ""

    def _now(self) -> float:
        now = self._clock()
        month = month_of(now)
        if month != self._month:  # last month's counters and idle windows are of no more use
            self._month = month
            self._spend = {name: units for name, units in self._spend.items() if name.endswith(month)}
            self._seeded = {name for name in self._seeded if name.endswith(month)}
            self._tats = {w: tat for w, tat in self._tats.items() if tat > now * 1e6}
        return now

    def spent_units(self, name: str) -> int:
        return self._spend.get(name, 0)

    async def spent_usd(self, scope: Scope, owner: str, month: str, team: str | None = None) -> Decimal:
        return from_units(self.spent_units(spend_key(scope, owner, month, team)))

    async def aclose(self) -> None:
        return None  # everything is in this process already

    async def admit(self, principal: Principal, reservation: Reservation) -> Admission:
        now = self._now()
        budgets = budgets_of(principal, month_of(now))
        unseeded = [b for b in budgets if b.counter not in self._seeded]
        if unseeded and self._rebuilds is not None:
            await self._rebuilds.rebuild(unseeded, now)
            now = self._now()
        # From here on nothing awaits: the checks and the charges are one step.
        for budget in budgets:
            spent, held = self.spent_units(budget.counter), self._holds.held(budget.counter, now)
            why = shortfall(budget.units, spent, held, reservation.units)
            if why is not None:
                raise budget_refusal(budget, why, spent, held, reservation.units, now)
        checks = [
            weigh(w, self._tats.get(w), now * 1e6, cost_in(w, reservation.tokens))
            for w in windows_for(principal)
        ]
        if not all(check.fits for check in checks):
            raise rate_limited(checks)
        for check in checks:
            self._tats[check.window] = check.tat_us
        hold = new_hold(budgets, reservation)
        if hold is not None:
            self._holds.place(hold, now + self._hold_ttl_s)
        return Admission(reservation, rate_limit_headers(checks), hold)

    async def _seed(self, name: str, units: int) -> None:
        self._spend[name] = max(self._spend.get(name, 0), units)
        self._seeded.add(name)

    async def settle(self, principal: Principal, event: UsageEvent, admission: Admission | None) -> None:
        if admission is not None and admission.hold is not None:
            self._holds.release(admission.hold)
        self._correct_tokens(principal, used_tokens(event) - reserved_tokens(admission))
        units = settled_units(event.cost)
        if units:
            month = month_of(event.created_at)
            for name in (
                spend_key("key", event.key_id, month, event.team_id),
                spend_key("team", event.team_id, month),
            ):
                self._spend[name] = self._spend.get(name, 0) + units

    async def release(self, principal: Principal, admission: Admission) -> None:
        if admission.hold is not None:
            self._holds.release(admission.hold)
        self._correct_tokens(principal, -admission.reservation.tokens)

    def _correct_tokens(self, principal: Principal, delta: int) -> None:
        if delta == 0:
            return
        now_us = self._now() * 1e6
        for window in token_windows(principal):
            self._tats[window] = corrected_tat(window, self._tats.get(window), now_us, delta)

    async def reconcile(self, spend: MonthSpend) -> None:
        for name, units in spend.counters().items():
            await self._seed(name, units)
