"""Permits for a replica's capacity: `PermitBank` is what a gate asks of them.

`LocalPermits` counts this process's permits only (the embedded default: caps hold per process);
`gateway.scheduling.redis_permits.RedisPermits` holds them across every gateway process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Caps:
    """One replica's limits; None is unlimited."""

    max_concurrency: int | None = None
    max_tokens_in_flight: int | None = None


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

    def start(self) -> None:
        """Begin background work (a shared bank's lease renewal); called in the serving loop."""
        ...

    async def aclose(self) -> None: ...


class LocalPermits:
    """This process's permits: exact, immediate, and blind to other processes."""

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}
        self._tokens: dict[str, int] = {}

    async def acquire(self, replica: str, tokens: int, caps: Caps, waiting: int) -> bool:
        return self.try_acquire(replica, tokens, caps)

    def try_acquire(self, replica: str, tokens: int, caps: Caps) -> bool:
        in_flight, held = self._in_flight.get(replica, 0), self._tokens.get(replica, 0)
        if caps.max_concurrency is not None and in_flight >= caps.max_concurrency:
            return False
        # A request larger than the whole token cap still goes, alone: it could never go otherwise.
        if caps.max_tokens_in_flight is not None and held > 0 and held + tokens > caps.max_tokens_in_flight:
            return False
        self._in_flight[replica], self._tokens[replica] = in_flight + 1, held + tokens
        return True

    def release(self, replica: str, tokens: int) -> None:
        self._in_flight[replica] = max(0, self._in_flight.get(replica, 0) - 1)
        self._tokens[replica] = max(0, self._tokens.get(replica, 0) - tokens)

    async def totals(self, replica: str) -> PermitTotals:
        return PermitTotals(self._in_flight.get(replica, 0), self._tokens.get(replica, 0), 1)

    def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
