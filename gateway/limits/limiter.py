"""The Limiter: admit a request against its rate windows and budgets, settle it once metered.

`MemoryLimiter` is the embedded single-process default; `RedisLimiter` (redis_limiter.py) holds
the same state in Redis so that every gateway process agrees. Both follow the same rules:
budgets first (QuotaExceeded), then every rate window at once (RateLimited; nothing is charged
unless all windows fit), and `settle` corrects the token estimate and adds the cost to the month.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from gateway.auth.principal import Principal
from gateway.limits.headers import rate_limit_headers, rate_limited
from gateway.limits.spend import MonthSpend, budget_refusal, from_units, month_of, spend_key, to_units
from gateway.limits.windows import Scope, Window, corrected_tat, cost_in, weigh, windows_for
from gateway.metering.events import UsageEvent

Clock = Callable[[], float]  # wall-clock unix seconds


@dataclass(frozen=True, slots=True)
class Admission:
    """A request let in: the tokens reserved for it and the x-ratelimit-* headers to answer with."""

    estimated_tokens: int
    headers: dict[str, str]


class Limiter(Protocol):
    async def admit(self, principal: Principal, estimated_tokens: int) -> Admission:
        """Charge one request and `estimated_tokens`, or raise RateLimited / QuotaExceeded."""
        ...

    def settle(self, principal: Principal, event: UsageEvent, estimated_tokens: int) -> Awaitable[None]:
        """After a metered request: replace the token estimate by the real count, add the cost.

        A Redis limiter queues its command before returning (see `ProxyService._meter`)."""
        ...

    async def release(self, principal: Principal, estimated_tokens: int) -> None:
        """A request admitted but never sent upstream: give its reserved tokens back."""
        ...

    async def reconcile(self, spend: MonthSpend) -> None:
        """Raise each month counter to at least what the usage records say (never lower one)."""
        ...

    async def spent_usd(self, scope: Scope, owner: str, month: str) -> Decimal:
        """A key's or team's spend counter for a month (`2026-11`)."""
        ...

    async def aclose(self) -> None:
        """Write what is held back (a graceful stop)."""
        ...


def used_tokens(event: UsageEvent) -> int:
    """What a request really used: OpenAI-format prompt tokens include cached and cache-write ones."""
    return event.prompt_tokens + event.completion_tokens


def token_windows(principal: Principal) -> list[Window]:
    if principal.key_tpm is None and principal.team_tpm is None:
        return []  # the common case, on every settle
    return [w for w in windows_for(principal) if w.kind == "tokens"]


class MemoryLimiter:
    """Windows and month counters in this process's memory (one process only)."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._tats: dict[Window, float] = {}
        self._spend: dict[str, int] = {}
        self._month = ""

    def _now(self) -> float:
        now = self._clock()
        month = month_of(now)
        if month != self._month:  # last month's counters and idle windows are of no more use
            self._month = month
            self._spend = {name: units for name, units in self._spend.items() if name.endswith(month)}
            self._tats = {w: tat for w, tat in self._tats.items() if tat > now * 1e6}
        return now

    def spent_units(self, name: str) -> int:
        return self._spend.get(name, 0)

    async def spent_usd(self, scope: Scope, owner: str, month: str) -> Decimal:
        return from_units(self.spent_units(spend_key(scope, owner, month)))

    async def aclose(self) -> None:
        return None  # everything is in this process already

    async def admit(self, principal: Principal, estimated_tokens: int) -> Admission:
        now = self._now()
        month = month_of(now)
        refusal = budget_refusal(
            principal,
            self.spent_units(spend_key("key", principal.key_id, month)),
            self.spent_units(spend_key("team", principal.team_id, month)),
            now,
        )
        if refusal is not None:
            raise refusal
        checks = [
            weigh(w, self._tats.get(w), now * 1e6, cost_in(w, estimated_tokens))
            for w in windows_for(principal)
        ]
        if not all(check.fits for check in checks):
            raise rate_limited(checks)
        for check in checks:
            self._tats[check.window] = check.tat_us
        return Admission(estimated_tokens, rate_limit_headers(checks))

    async def settle(self, principal: Principal, event: UsageEvent, estimated_tokens: int) -> None:
        self._correct_tokens(principal, used_tokens(event) - estimated_tokens)
        units = to_units(event.cost)
        if units:
            month = month_of(event.created_at)
            for name in (spend_key("key", event.key_id, month), spend_key("team", event.team_id, month)):
                self._spend[name] = self._spend.get(name, 0) + units

    async def release(self, principal: Principal, estimated_tokens: int) -> None:
        self._correct_tokens(principal, -estimated_tokens)

    def _correct_tokens(self, principal: Principal, delta: int) -> None:
        if delta == 0:
            return
        now_us = self._now() * 1e6
        for window in token_windows(principal):
            self._tats[window] = corrected_tat(window, self._tats.get(window), now_us, delta)

    async def reconcile(self, spend: MonthSpend) -> None:
        for name, units in spend.counters().items():
            self._spend[name] = max(self._spend.get(name, 0), units)
