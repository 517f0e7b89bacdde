"""Failed key attempts per client, reserved before a key is checked: the console's sign-in and the
admin API share them, so a client has one budget of guesses at the admin key, wherever it sends them.

An attempt takes a slot of its client's budget first (atomically: an INCR in a Redis script, or a
step of this process's event loop with no await between reading the count and raising it), then its
key is checked; a key that verifies gives the slot back, a refused key keeps it. So 50 simultaneous
attempts with a budget of 10 are 10 checks and 40 refusals, never 50 checks that each saw room left.

Budgets are kept per client address and per what the attempt can be:

- `admin`: anything not shaped like a gateway key. Only the admin key can match it; its budget is
  the bound on guessing the admin key, which an operator may have chosen weak.
- `keys`: the shape of a gateway team key (`sk-gw-` and 256 random bits). Guessing one is hopeless;
  this budget bounds the checks a client makes (typos, revoked keys, an old script, a scanner).

A correct key is never refused for failures of the other kind, nor for any other address's: failed
team keys from an office's shared address (or a proxy's) do not lock the admin out. A strong admin
key (`STRONG_ADMIN_KEY_CHARS` or more, as `openssl rand -hex 32` gives) is never refused at all: it
is compared, in constant time, before any budget is consulted, since guessing it is hopeless with or
without a bound, so a lockout can only stall the operator, never protect the key. A shorter admin key
may be guessable: then `limit` wrong guesses at it from one address lock that address out for the
window, the admin included (letting a correct key through a spent budget would mean checking every
guess, and nothing would bound them); `gateway check-config` and the start-up log say so. Behind a reverse proxy, the address is the
proxy's unless it is trusted to name the client (GATEWAY_TRUSTED_PROXIES, gateway.server.forwarded).

Counts live in Redis when the gateway has it (every process shares them) and in the process otherwise,
or while Redis is unreachable (then each process counts alone, and a warning says so).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from redis.exceptions import RedisError

from gateway.auth.secrets import constant_time_equals, looks_like_team_key
from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.auth")

T = TypeVar("T")

STRONG_ADMIN_KEY_CHARS = 32  # 32 hex digits are 128 random bits
WEAK_ADMIN_KEY = (
    f"GATEWAY_ADMIN_KEY is shorter than {STRONG_ADMIN_KEY_CHARS} characters: ten wrong guesses from "
    "an address lock that address out of the admin API and the console for 5 minutes, the admin "
    "included (openssl rand -hex 32 makes a key that is never locked out)"
)
FAILURES_ALLOWED = 10  # per client address, kind and window: enough for typos, too few for guessing
WINDOW_S = 300.0
KEY_PREFIX = "gateway:auth:failed-attempts:"  # then <kind>:<address>
MAX_REMEMBERED = 100_000  # budgets per process: a flood of addresses cannot grow memory without bound

# KEYS[1]: a budget's counter. ARGV: the limit, the window (ms). Takes a slot if one is left
# (the window starts with the first); replies {1, 0}, or {0, ms until the window ends}.
_RESERVE = """
local taken = redis.call('INCR', KEYS[1])
if taken == 1 or redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if taken > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1])}
end
return {1, 0}
"""
# Gives a slot back; a counter whose window has ended stays gone.
_RELEASE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 0
"""


class TooManyAttempts(Exception):
    """The client has no attempts left in this window: its key is not checked."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("too many failed attempts")
        self.retry_after_s = max(1, math.ceil(retry_after_s))


@dataclass(frozen=True, slots=True)
class _Slot:
    budget: str
    shared: bool  # taken in Redis, so given back there


class KeyAttempts:
    """At most `limit` failed key attempts per client address and kind in a window of `window_s`."""

    def __init__(
        self,
        redis: RedisClient | None,
        limit: int = FAILURES_ALLOWED,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        admin_key: str | None = None,
    ) -> None:
        self.limit = limit
        # a strong admin key is let through whatever the budgets say (see the module docstring)
        self._unthrottled_key = admin_key if strong_admin_key(admin_key) else None
        self.window_s = window_s
        self._redis = redis
        self._clock = clock
        self._local: dict[str, tuple[float, int]] = {}  # budget -> (window start, slots taken)
        self._reserve_script = redis.register_script(_RESERVE) if redis is not None else None
        self._release_script = redis.register_script(_RELEASE) if redis is not None else None

    async def check(self, address: str, key: str, verify: Callable[[], Awaitable[T | None]]) -> T | None:
        """`verify()`'s answer for `key` from `address`, checked only if the client has an attempt
        left (TooManyAttempts otherwise); None (a refused key) keeps the attempt as a failure, and
        anything else, or an error while checking, gives it back."""
        if self._unthrottled_key is not None and constant_time_equals(key, self._unthrottled_key):
            return await verify()
        slot = await self._reserve(budget_of(address, key))
        try:
            accepted = await verify()
        except BaseException:
            await self._release(slot)
            raise
        if accepted is not None:
            await self._release(slot)
        return accepted

    async def _reserve(self, budget: str) -> _Slot:
        if self._reserve_script is not None:
            try:
                taken, wait_ms = await self._reserve_script(
                    keys=[KEY_PREFIX + budget], args=[self.limit, self._window_ms]
                )
            except (RedisError, OSError) as exc:
                log.warning("failed_attempts_not_shared", error=type(exc).__name__)
            else:
                if not int(taken):
                    raise TooManyAttempts(max(int(wait_ms), 0) / 1000)
                return _Slot(budget, shared=True)
        self._reserve_local(budget)
        return _Slot(budget, shared=False)

    async def _release(self, slot: _Slot) -> None:
        if not slot.shared:
            self._release_local(slot.budget)
            return
        assert self._release_script is not None
        try:
            await self._release_script(keys=[KEY_PREFIX + slot.budget])
        except (RedisError, OSError) as exc:
            log.warning("failed_attempts_not_shared", error=type(exc).__name__)

    @property
    def _window_ms(self) -> int:
        return int(self.window_s * 1000)

    def _reserve_local(self, budget: str) -> None:
        now = self._clock()
        started, taken = self._local.pop(budget, (now, 0))
        if now - started >= self.window_s:
            started, taken = now, 0
        self._local[budget] = (started, taken)  # re-inserted: the dict stays oldest first
        if taken >= self.limit:
            raise TooManyAttempts(started + self.window_s - now)
        self._local[budget] = (started, taken + 1)
        while len(self._local) > MAX_REMEMBERED:
            del self._local[next(iter(self._local))]

    def _release_local(self, budget: str) -> None:
        counted = self._local.get(budget)
        if counted is not None and counted[1] > 0:
            self._local[budget] = (counted[0], counted[1] - 1)


def strong_admin_key(admin_key: str | None) -> bool:
    """Whether an admin key is long enough that guessing it needs no lockout."""
    return admin_key is not None and len(admin_key) >= STRONG_ADMIN_KEY_CHARS


def budget_of(address: str, key: str) -> str:
    """The budget an attempt draws on: its kind (`keys` or `admin`) and its client's address."""
    return f"{'keys' if looks_like_team_key(key) else 'admin'}:{address}"
