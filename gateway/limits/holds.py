"""Reservations held against month budgets, in this process's memory.

`MemoryLimiter` keeps all its holds here, `RedisLimiter` only those it placed while Redis was
unreachable. A hold ends when its request is settled or released, or when it expires: a request
that never settles (its process lost it) stops holding budget after the hold's lifetime.
"""

from __future__ import annotations

import heapq
import secrets
from dataclasses import dataclass

HOLD_TTL_S = 1800.0  # a hold outlives what a request may take: provider timeouts times attempts


def new_hold_id() -> str:
    """Random, so unique across processes (forked workers included) without coordination."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Hold:
    """`units` (1e-10 USD) reserved by one request against the spend counters named."""

    id: str
    counters: tuple[str, ...]  # spend counter names (`gw:spend:...`), one per budget that binds
    units: int
    local: bool = False  # held in this process: Redis was unreachable when it was placed

    @property
    def member(self) -> str:
        """Its name in Redis: the units first, so that expiring it needs nothing else."""
        return f"{self.units}:{self.id}"


class LocalHolds:
    """Holds and their totals per counter; expired holds are dropped as the totals are read."""

    def __init__(self) -> None:
        self._holds: dict[str, tuple[Hold, float]] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._totals: dict[str, int] = {}

    def held(self, counter: str, now: float) -> int:
        self._expire(now)
        return self._totals.get(counter, 0)

    def place(self, hold: Hold, deadline: float) -> None:
        self._holds[hold.id] = (hold, deadline)
        heapq.heappush(self._deadlines, (deadline, hold.id))
        for counter in hold.counters:
            self._totals[counter] = self._totals.get(counter, 0) + hold.units

    def release(self, hold: Hold) -> None:
        """End a hold (settled, released); one that already ended or expired is left alone."""
        if self._holds.pop(hold.id, None) is None:
            return
        for counter in hold.counters:
            left = self._totals.get(counter, 0) - hold.units
            if left > 0:
                self._totals[counter] = left
            else:
                self._totals.pop(counter, None)

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, hold_id = heapq.heappop(self._deadlines)
            entry = self._holds.get(hold_id)
            if entry is not None:
                self.release(entry[0])
