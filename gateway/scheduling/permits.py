"""Permits for a replica's capacity shared by processes: `PermitBank` is what a gate asks of them.

Without a bank (no Redis, the embedded default) a gate counts this process's requests itself and
caps hold per process (`fits`); `gateway.scheduling.redis.permits.RedisPermits` holds them across
every gateway process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Caps:
    """One replica's limits; None is unlimited."""

    max_concurrency: int | None = None
    max_tokens_in_flight: int | None = None

    @property
    def bounded(self) -> bool:
        return self.max_concurrency is not None or self.max_tokens_in_flight is not None


@dataclass(frozen=True, slots=True)
class PermitTotals:
    """What every process holds at one replica, as the bank last saw it."""

    in_flight: int
    tokens: int
    processes: int


class PermitBank(Protocol):
    async def acquire(self, replica: str, tokens: int, caps: Caps, waiting: int) -> bool:
        """One permit holding `tokens` at `replica` if the caps allow it now, else False (no wait).

        `waiting`: how many requests this process has queued for the replica, so that a bank shared
        by processes can split the cap between the processes that want it."""
        ...

    def release(self, replica: str, tokens: int) -> None:
        """Give one permit back (never blocks: a shared bank sends it in the background)."""
        ...

    async def totals(self, replica: str) -> PermitTotals: ...

    def watch(self, replica: str, wake: Callable[[], None]) -> None:
        """Call `wake` (in the serving loop) when a permit at `replica` may have come free
        elsewhere: released by another process, or by another gate of this one."""
        ...

    @property
    def poll_s(self) -> float:
        """How long a gate waiting on this bank may sleep unwoken: long while releases elsewhere
        wake it (`watch`), short while they cannot."""
        ...

    def start(self) -> None:
        """Begin background work (a shared bank's lease renewal); called in the serving loop."""
        ...

    async def aclose(self) -> None: ...


def fits(caps: Caps, in_flight: int, tokens_in_flight: int, tokens: int) -> bool:
    """Whether one more request holding `tokens` stays within `caps`, given what is in flight.
    A request larger than the whole token cap still goes, alone: it could never go otherwise."""
    if caps.max_concurrency is not None and in_flight >= caps.max_concurrency:
        return False
    limit = caps.max_tokens_in_flight
    return limit is None or tokens_in_flight == 0 or tokens_in_flight + tokens <= limit
