"""What the console remembers beyond its tokens: sessions signed out before they expired, and failed
sign-ins per client address. Both live in Redis when the gateway has it, so every process sees them,
and in this process's memory otherwise (the single-process default).

Redis being unreachable never locks anyone out: a sign-out is then known to this process only, and
failed sign-ins are counted here only; a warning says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from redis.exceptions import RedisError

from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.console")

SIGNED_OUT_PREFIX = "gateway:console:signed-out:"
FAILURES_PREFIX = "gateway:console:failed-sign-ins:"
MAX_REMEMBERED = 100_000  # per process, each kind: a flood cannot grow memory without bound


class SignOuts:
    """Session ids signed out, each remembered until its token would have expired anyway."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._local: dict[str, float] = {}  # session id -> its token's expiry

    async def add(self, redis: RedisClient | None, sid: str, expires_at: float) -> None:
        remaining = int(expires_at - self._clock()) + 1
        self._remember(sid, expires_at)
        if redis is None:
            return
        try:
            await redis.set(SIGNED_OUT_PREFIX + sid, b"1", ex=max(remaining, 1))
        except (RedisError, OSError) as exc:
            log.warning("console_sign_out_not_shared", error=type(exc).__name__)

    async def contains(self, redis: RedisClient | None, sid: str) -> bool:
        if sid in self._local:
            return True
        if redis is None:
            return False
        try:
            return bool(await redis.exists(SIGNED_OUT_PREFIX + sid))
        except (RedisError, OSError) as exc:
            log.warning("console_sign_out_unknown", error=type(exc).__name__)
            return False

    def _remember(self, sid: str, expires_at: float) -> None:
        now = self._clock()
        self._local = {s: exp for s, exp in self._local.items() if exp > now}
        self._local[sid] = expires_at
        while len(self._local) > MAX_REMEMBERED:
            del self._local[next(iter(self._local))]


class FailedSignIns:
    """At most `limit` failed sign-ins per client address in a window of `window_s`."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._local: dict[str, tuple[float, int]] = {}  # address -> (window start, failures)

    async def blocked(self, redis: RedisClient | None, address: str) -> bool:
        """Whether this address has used up its failures for the current window."""
        return await self._count(redis, address) >= self.limit

    async def record(self, redis: RedisClient | None, address: str) -> None:
        self._bump_local(address)
        if redis is None:
            return
        key = FAILURES_PREFIX + address
        try:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, int(self.window_s), nx=True)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("console_failed_sign_in_not_shared", error=type(exc).__name__)

    async def _count(self, redis: RedisClient | None, address: str) -> int:
        local = self._local_count(address)
        if redis is None:
            return local
        try:
            shared = await redis.get(FAILURES_PREFIX + address)
        except (RedisError, OSError) as exc:
            log.warning("console_failed_sign_ins_unknown", error=type(exc).__name__)
            return local
        return max(local, int(shared or 0))

    def _local_count(self, address: str) -> int:
        started, failures = self._local.get(address, (0.0, 0))
        return failures if self._clock() - started < self.window_s else 0

    def _bump_local(self, address: str) -> None:
        now = self._clock()
        started, failures = self._local.pop(address, (now, 0))
        if now - started >= self.window_s:
            started, failures = now, 0
        self._local[address] = (started, failures + 1)  # re-inserted: the dict stays oldest first
        while len(self._local) > MAX_REMEMBERED:
            del self._local[next(iter(self._local))]
