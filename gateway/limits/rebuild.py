"""Month counters rebuilt from the usage records when admission finds them missing.

A counter is trusted only once it was seeded from the records (at start-up, or here): a Redis that
restarted empty, or a process that started a moment ago, has unseeded counters, and a budget
decision waits for the seed. One query per counter at a time, however many requests wait for it;
when the records cannot be read in time the request is refused with 503 rather than admitted
against a spend that may be gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog

from gateway.errors import ServiceUnavailable
from gateway.limits.spend import Budget
from gateway.limits.windows import Scope

log = structlog.get_logger("gateway.limits")

REBUILD_TIMEOUT_S = 5.0  # how long an admission waits for the records before its 503

Seed = Callable[[str, int], Awaitable[None]]
"""Raise a counter (its name) to at least the units the records hold, and mark it seeded."""


class SpendRecords(Protocol):
    async def month_units(self, scope: Scope, owner: str, now: float) -> int:
        """The key's or team's spend in the UTC month holding `now`, in units; ServiceUnavailable
        when the records cannot be read."""
        ...


class SpendRebuilds:
    def __init__(self, records: SpendRecords, seed: Seed, timeout_s: float = REBUILD_TIMEOUT_S) -> None:
        self._records = records
        self._seed = seed
        self._timeout_s = timeout_s
        self._running: dict[str, asyncio.Future[None]] = {}

    async def rebuild(self, budgets: Sequence[Budget], now: float) -> None:
        """Seed the counters of `budgets` from the records; ServiceUnavailable if that fails or
        takes longer than the timeout (the rebuild goes on for the requests after this one)."""
        running = [self._start(budget, now) for budget in budgets]
        try:
            async with asyncio.timeout(self._timeout_s):
                await asyncio.gather(*map(asyncio.shield, running))
        except TimeoutError:
            raise ServiceUnavailable(
                "Budgets cannot be checked right now: the month's spend is being rebuilt from the usage "
                "records, which did not answer in time. Retry shortly.",
                headers={"retry-after": "1"},
            ) from None

    def _start(self, budget: Budget, now: float) -> asyncio.Future[None]:
        running = self._running.get(budget.counter)
        if running is None:
            running = asyncio.ensure_future(self._rebuild_one(budget, now))
            self._running[budget.counter] = running
            running.add_done_callback(lambda done: self._done(budget.counter, done))
        return running

    async def _rebuild_one(self, budget: Budget, now: float) -> None:
        units = await self._records.month_units(budget.scope, budget.owner, now)
        await self._seed(budget.counter, units)
        log.info("spend_rebuilt", scope=budget.scope, owner=budget.owner, month=budget.month, units=units)

    def _done(self, counter: str, done: asyncio.Future[None]) -> None:
        if self._running.get(counter) is done:
            del self._running[counter]
        if not done.cancelled() and done.exception() is not None:  # retrieved: not logged as lost
            log.warning("spend_rebuild_failed", counter=counter, error=type(done.exception()).__name__)
