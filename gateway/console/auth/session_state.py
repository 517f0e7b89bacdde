"""What the console remembers beyond its tokens: sessions signed out before they expired. They live
in Redis when the gateway has it, so every process sees them, and in this process's memory otherwise
(the single-process default); with Redis unreachable, a sign-out is known to this process only, and a
warning says so. (Failed sign-ins are counted with the admin API's failed keys: gateway.auth.attempts.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from redis.exceptions import RedisError

from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.console")

SIGNED_OUT_PREFIX = "gateway:console:signed-out:"
MAX_REMEMBERED = 100_000  # per process: a flood cannot grow memory without bound


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
