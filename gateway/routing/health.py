"""Provider health: a circuit breaker per deployment, shared by all processes through Redis.

Routing reads a local snapshot (no I/O per request); outcomes are written through to Redis and
the snapshot is refreshed from it every `refresh_interval_s`. Without Redis the local board is
the whole truth (the embedded single-process default).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from redis.exceptions import RedisError

from gateway.redis.client import RedisClient
from gateway.settings import CircuitSettings


class CircuitState(str, Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # cool-down over: traffic may probe again


@dataclass(slots=True)
class Circuit:
    failures: int = 0  # consecutive
    opened_at: float | None = None

    def state(self, now: float, cooldown_s: float) -> CircuitState:
        if self.opened_at is None:
            return CircuitState.CLOSED
        return CircuitState.OPEN if now - self.opened_at < cooldown_s else CircuitState.HALF_OPEN


class OpenCircuits(frozenset[str]):
    """The deployments whose circuit is open, each with the seconds until it turns half-open.

    A set, so that routing can skip its members as it skips any set of names; the waits let a
    refusal say when to come back (`Retry-After`)."""

    half_open_in: dict[str, float]

    def __new__(cls, half_open_in: Mapping[str, float]) -> OpenCircuits:
        circuits = super().__new__(cls, half_open_in)
        circuits.half_open_in = dict(half_open_in)
        return circuits

    # Equal to any set of the same names: the waits say when, not what is open.
    def __eq__(self, other: object) -> bool:
        return frozenset.__eq__(self, other)

    __hash__ = frozenset.__hash__

    def retry_after_s(self, deployments: Iterable[str]) -> int:
        """Whole seconds until the first of `deployments` turns half-open: at least 1."""
        waits = [self.half_open_in[d] for d in deployments if d in self.half_open_in]
        return max(1, math.ceil(min(waits, default=1.0)))


class HealthBoard:
    """The in-process board; `RedisHealthBoard` shares it between processes."""

    def __init__(
        self, deployments: Iterable[str], settings: CircuitSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._circuits = {d: Circuit() for d in deployments}
        self.in_flight = dict.fromkeys(self._circuits, 0)

    def open_circuits(self) -> OpenCircuits:
        """The deployments routing must skip: those whose circuit is open (not yet half-open)."""
        now, cooldown = self._clock(), self._settings.cooldown_s
        return OpenCircuits(
            {
                d: c.opened_at + cooldown - now
                for d, c in self._circuits.items()
                if c.opened_at is not None and c.state(now, cooldown) is CircuitState.OPEN
            }
        )

    def state_of(self, deployment: str) -> tuple[CircuitState, int]:
        circuit = self._circuits.setdefault(deployment, Circuit())
        return circuit.state(self._clock(), self._settings.cooldown_s), circuit.failures

    async def record_success(self, deployment: str) -> None:
        circuit = self._circuits.setdefault(deployment, Circuit())
        circuit.failures, circuit.opened_at = 0, None

    async def record_failure(self, deployment: str) -> None:
        self._apply_failure(self._circuits.setdefault(deployment, Circuit()))

    def _apply_failure(self, circuit: Circuit) -> None:
        now = self._clock()
        circuit.failures += 1
        reopen = circuit.state(now, self._settings.cooldown_s) is CircuitState.HALF_OPEN
        if circuit.failures >= self._settings.failure_threshold and (circuit.opened_at is None or reopen):
            circuit.opened_at = now

    async def refresh(self) -> None:
        """Pull the shared state (nothing to do for the local board)."""

    def needs_reset(self, deployment: str) -> bool:
        circuit = self._circuits.get(deployment)
        return circuit is not None and (circuit.failures > 0 or circuit.opened_at is not None)


# KEYS[1] circuit hash; ARGV: now, threshold, cooldown
_FAILURE = """
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local opened = tonumber(redis.call('HGET', KEYS[1], 'opened_at'))
local now = tonumber(ARGV[1])
if failures >= tonumber(ARGV[2]) and (not opened or now - opened >= tonumber(ARGV[3])) then
  redis.call('HSET', KEYS[1], 'opened_at', ARGV[1])
  opened = now
end
return {failures, tostring(opened or '')}
"""


class RedisHealthBoard(HealthBoard):
    PREFIX = "gw:circuit:"

    def __init__(
        self,
        redis: RedisClient,
        deployments: Iterable[str],
        settings: CircuitSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(deployments, settings, clock)
        self._redis = redis
        self._failure = redis.register_script(_FAILURE)
        self.degraded = False

    async def record_success(self, deployment: str) -> None:
        if not self.needs_reset(deployment):
            return  # the common case: no write at all
        await super().record_success(deployment)
        try:
            await self._redis.delete(self.PREFIX + deployment)
            self.degraded = False
        except RedisError:
            self.degraded = True

    async def record_failure(self, deployment: str) -> None:
        circuit = self._circuits.setdefault(deployment, Circuit())
        try:
            failures, opened = await self._failure(
                keys=[self.PREFIX + deployment],
                args=[self._clock(), self._settings.failure_threshold, self._settings.cooldown_s],
            )
        except RedisError:
            self.degraded = True
            self._apply_failure(circuit)
            return
        self.degraded = False
        circuit.failures = int(failures)
        circuit.opened_at = float(opened) if opened else None

    async def refresh(self) -> None:
        names = list(self._circuits)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hmget(self.PREFIX + name, "failures", "opened_at")
                replies = await pipe.execute()
        except RedisError:
            self.degraded = True
            return
        self.degraded = False
        for name, (failures, opened) in zip(names, replies, strict=True):
            circuit = self._circuits[name]
            circuit.failures = int(failures or 0)
            circuit.opened_at = float(opened) if opened else None
