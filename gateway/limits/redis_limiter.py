"""RedisLimiter: rate windows and month spend in Redis, exact across every gateway process.

One Lua script per admission reads both month counters and every applicable window (key and
team, requests and tokens), and charges the windows only if the budgets allow and all of them fit:
one round trip, atomic. Window state is one GCRA TAT per window (`gw:rate:<scope>:<id>:<kind>`, a
float of microseconds, expiring once the bucket is full again); spend is an integer count of
1e-10 USD (`gw:spend:<scope>:<id>:<YYYY-MM>`, INCRBY, 35-day TTL). Time is Redis's own clock
(TIME) unless a clock is injected, so processes on different hosts agree.

When Redis is unreachable, rate limits fail open (logged once) and budgets are enforced from the
last spend read plus what this process settled meanwhile, which is added to Redis on recovery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from decimal import Decimal
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.auth.principal import Principal
from gateway.limits.headers import rate_limit_headers, rate_limited
from gateway.limits.limiter import Admission, Clock, token_windows, used_tokens
from gateway.limits.spend import (
    SPEND_TTL_S,
    MonthSpend,
    budget_refusal,
    from_units,
    month_of,
    spend_key,
    to_units,
)
from gateway.limits.windows import Scope, Window, WindowCheck, cost_in, windows_for
from gateway.metering.events import UsageEvent
from gateway.redis.group_commit import PipelineBatcher

log = structlog.get_logger("gateway.limits")

_PRELUDE = """
local W = 60000000
local function now_us(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(x) return string.format('%.17g', x) end
local function store(key, tat, now)
  if tat > now then
    redis.call('SET', key, fmt(tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  else
    redis.call('DEL', key)
  end
end
local function base_of(key, now)
  local tat = tonumber(redis.call('GET', key) or '')
  if tat and tat > now then return tat end
  return now
end
"""

# KEYS: key spend, team spend, window TATs...; ARGV: now_us|'', key budget|'', team budget|'',
# then (limit, cost) per window. Spend and budgets are integer strings compared as such (exact
# beyond 2^53). Reply: status ('ok'|'limited'|'quota'), now, key spend, team spend, then
# (tat, wait) per window.
_ADMIT = (
    _PRELUDE
    + """
local function ge(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end
local now = now_us(ARGV[1])
local key_spent = redis.call('GET', KEYS[1]) or '0'
local team_spent = redis.call('GET', KEYS[2]) or '0'
local reply = {'ok', fmt(now), key_spent, team_spent}
if (ARGV[2] ~= '' and ge(key_spent, ARGV[2])) or (ARGV[3] ~= '' and ge(team_spent, ARGV[3])) then
  reply[1] = 'quota'
  return reply
end
local tats = {}
for i = 3, #KEYS do
  local limit, cost = tonumber(ARGV[2 * i - 2]), tonumber(ARGV[2 * i - 1])
  local base = base_of(KEYS[i], now)
  local charged = base + cost * (W / limit)
  local wait = 0
  tats[i] = charged
  if charged - W > now + 1 then
    reply[1] = 'limited'
    wait = charged - W - now
    tats[i] = base
  end
  table.insert(reply, fmt(tats[i]))
  table.insert(reply, fmt(wait))
end
if reply[1] == 'ok' then
  for i = 3, #KEYS do store(KEYS[i], tats[i], now) end
end
return reply
"""
)

# KEYS: key spend, team spend, token window TATs...; ARGV: now_us|'', units, ttl_s, tokens delta,
# then the limit per token window.
_SETTLE = (
    _PRELUDE
    + """
if ARGV[2] ~= '0' then
  for i = 1, 2 do
    redis.call('INCRBY', KEYS[i], ARGV[2])
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  end
end
local delta = tonumber(ARGV[4])
if delta ~= 0 then
  local now = now_us(ARGV[1])
  for i = 3, #KEYS do
    local tat = base_of(KEYS[i], now) + delta * (W / tonumber(ARGV[i + 2]))
    store(KEYS[i], math.max(tat, now), now)
  end
end
return 1
"""
)

# Raise a counter to at least ARGV[1] units (integer strings; the records lag behind the counters).
_RAISE = """
local current = redis.call('GET', KEYS[1]) or '0'
local wanted = ARGV[1]
if #wanted > #current or (#wanted == #current and wanted > current) then
  redis.call('SET', KEYS[1], wanted, 'EX', ARGV[2])
  return 1
end
return 0
"""


async def _nothing() -> None:
    return None


def window_key(window: Window) -> str:
    return f"gw:rate:{window.scope}:{window.owner}:{window.kind}"


DEFERRED_SPEND_S = 0.5  # how long the spend of callers no budget binds is summed before it is written


def _budget_arg(units: int | None) -> str:
    return "" if units is None else str(units)


class RedisLimiter:
    def __init__(
        self,
        redis: Redis,
        clock: Clock | None = None,
        wall_clock: Clock | None = None,
        batcher: PipelineBatcher | None = None,
    ) -> None:
        """`clock` None: windows run on Redis's TIME; `wall_clock` names the month (default time.time)."""
        self._redis = redis
        self._clock = clock
        self._wall = wall_clock or clock or time.time
        self._admit = redis.register_script(_ADMIT)
        self._settle = redis.register_script(_SETTLE)
        self._raise = redis.register_script(_RAISE)
        self._batcher = batcher or PipelineBatcher(redis)  # settles of the same moment share a round trip
        self._known: dict[str, int] = {}  # spend counters as last read from Redis
        self._pending: dict[str, int] = {}  # spend settled while Redis was unreachable
        # Spend of callers whom no budget binds, summed per pair of counters until the next write
        self._deferred: dict[tuple[str, str], int] = {}
        self._deferred_write: asyncio.TimerHandle | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self.degraded = False

    def _now_arg(self) -> str:
        return "" if self._clock is None else repr(self._clock() * 1e6)

    async def admit(self, principal: Principal, estimated_tokens: int) -> Admission:
        if principal.unlimited and not self._pending:
            return Admission(estimated_tokens, {})  # nothing to check: spare Redis the round trip
        now = self._wall()
        names = (
            spend_key("key", principal.key_id, month_of(now)),
            spend_key("team", principal.team_id, month_of(now)),
        )
        windows = windows_for(principal)
        args = [self._now_arg(), *self._budget_args(principal)]
        for window in windows:
            args += [str(window.limit), str(cost_in(window, estimated_tokens))]
        try:
            await self._flush_pending()
            reply = await self._admit(keys=[*names, *map(window_key, windows)], args=args)
        except RedisError as exc:
            self._degrade(exc)
            return self._admit_locally(principal, estimated_tokens, names, now)
        self._recover()
        status, now_us, key_spent, team_spent, *states = (item.decode() for item in reply)
        self._known[names[0]], self._known[names[1]] = int(key_spent), int(team_spent)
        if status == "quota":
            refusal = budget_refusal(principal, int(key_spent), int(team_spent), now)
            assert refusal is not None
            raise refusal
        checks = _checks(windows, estimated_tokens, float(now_us), states)
        if status == "limited":
            raise rate_limited(checks)
        return Admission(estimated_tokens, rate_limit_headers(checks))

    @staticmethod
    def _budget_args(principal: Principal) -> list[str]:
        key_budget, team_budget = principal.key_budget_usd, principal.team_budget_usd
        return [
            _budget_arg(None if key_budget is None else to_units(key_budget)),
            _budget_arg(None if team_budget is None else to_units(team_budget)),
        ]

    def _admit_locally(
        self, principal: Principal, estimated_tokens: int, names: tuple[str, str], now: float
    ) -> Admission:
        """Redis is down: no rate limits (fail open), budgets from what this process knows."""
        spent = [self._known.get(name, 0) + self._pending.get(name, 0) for name in names]
        refusal = budget_refusal(principal, spent[0], spent[1], now)
        if refusal is not None:
            raise refusal
        return Admission(estimated_tokens, {})

    def settle(self, principal: Principal, event: UsageEvent, estimated_tokens: int) -> Awaitable[None]:
        """Queued before this returns, so that it shares the round trip of the usage append its
        caller makes next; the awaitable is its outcome.

        A caller whom no window or budget binds (`Principal.unlimited`) has nothing to settle now:
        its spend is only kept for a budget set later. It is summed here and written every
        `DEFERRED_SPEND_S` (one command per key and team, not one per request); a process that
        dies first loses at most that much, which the start-up reconcile restores from the usage
        records."""
        month = month_of(event.created_at)
        names = (spend_key("key", event.key_id, month), spend_key("team", event.team_id, month))
        if principal.unlimited:
            self._defer(names, to_units(event.cost))
            return _nothing()
        return self._apply(principal, names, to_units(event.cost), used_tokens(event) - estimated_tokens)

    def _defer(self, names: tuple[str, str], units: int) -> None:
        if not units:
            return
        self._deferred[names] = self._deferred.get(names, 0) + units
        if self._deferred_write is None:
            loop = asyncio.get_running_loop()
            self._deferred_write = loop.call_later(DEFERRED_SPEND_S, self._write_deferred_soon)

    def _write_deferred_soon(self) -> None:
        self._deferred_write = None
        task = asyncio.ensure_future(self._write_deferred())
        self._writing.add(task)  # kept until done: a task nobody holds may be collected mid-way
        task.add_done_callback(self._writing.discard)

    async def _write_deferred(self) -> None:
        deferred, self._deferred = self._deferred, {}
        await asyncio.gather(
            *(self._settle_counters(names, list(names), [], units, 0) for names, units in deferred.items())
        )

    async def _write_deferred_now(self) -> None:
        if self._deferred_write is not None:
            self._deferred_write.cancel()
            self._deferred_write = None
        if self._deferred:
            await self._write_deferred()

    async def aclose(self) -> None:
        """Write the deferred spend now (a graceful stop), and wait for writes under way."""
        await self._write_deferred_now()
        if self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    async def release(self, principal: Principal, estimated_tokens: int) -> None:
        month = month_of(self._wall())
        names = (spend_key("key", principal.key_id, month), spend_key("team", principal.team_id, month))
        await self._apply(principal, names, 0, -estimated_tokens)

    def _apply(self, principal: Principal, names: tuple[str, str], units: int, delta: int) -> Awaitable[None]:
        windows = token_windows(principal) if delta else []
        if not units and not windows:
            return _nothing()
        keys, limits = [*names, *map(window_key, windows)], [w.limit for w in windows]
        return self._settle_counters(names, keys, limits, units, delta)

    def _settle_counters(
        self, names: tuple[str, str], keys: list[str], limits: list[int], units: int, delta: int
    ) -> Awaitable[None]:
        if self._pending:  # what was settled during an outage goes to Redis first
            return self._apply_after_outage(names, keys, limits, units, delta)
        return self._applied(names, units, self._queue_settle(keys, limits, units, delta))

    async def _apply_after_outage(
        self, names: tuple[str, str], keys: list[str], limits: list[int], units: int, delta: int
    ) -> None:
        try:
            await self._flush_pending()
        except RedisError as exc:
            self._failed(exc, names, units)
            return
        await self._applied(names, units, self._queue_settle(keys, limits, units, delta))

    async def _applied(self, names: tuple[str, str], units: int, reply: Awaitable[Any]) -> None:
        try:
            await reply
        except RedisError as exc:
            self._failed(exc, names, units)
            return
        self._recover()
        for name in names if units else ():
            self._known[name] = self._known.get(name, 0) + units

    def _failed(self, exc: RedisError, names: tuple[str, str], units: int) -> None:
        self._degrade(exc)
        for name in names if units else ():
            self._pending[name] = self._pending.get(name, 0) + units

    def _queue_settle(self, keys: list[str], limits: list[int], units: int, delta: int) -> Awaitable[Any]:
        """The settles of the same counters queued before the next round trip go out as one script
        call with their spend and token corrections summed (`gateway.redis.group_commit`): under load,
        one command per key and round trip instead of one per request."""

        def keys_and_args(items: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
            total_units, total_delta = sum(u for u, _ in items), sum(d for _, d in items)
            return keys, self._settle_args(total_units, total_delta, limits)

        return self._batcher.merge_script(self._settle, (*keys, *limits), (units, delta), keys_and_args)

    def _settle_args(self, units: int, delta: int, limits: list[int]) -> list[str]:
        return [self._now_arg(), str(units), str(SPEND_TTL_S), str(delta), *map(str, limits)]

    async def _flush_pending(self) -> None:
        """Add the spend settled during an outage to Redis, once it answers again."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}  # taken before awaiting: flushed once only
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for name, units in pending.items():
                    pipe.incrby(name, units)
                    pipe.expire(name, SPEND_TTL_S)
                await pipe.execute()
        except RedisError:
            for name, units in pending.items():
                self._pending[name] = self._pending.get(name, 0) + units
            raise
        log.info("spend_outage_flushed", counters=len(pending))

    async def reconcile(self, spend: MonthSpend) -> None:
        await self._write_deferred_now()  # the counters to compare with the records are whole
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, units in spend.counters().items():
                await self._raise(keys=[name], args=[str(units), SPEND_TTL_S], client=pipe)
            await pipe.execute()

    async def spent_usd(self, scope: Scope, owner: str, month: str) -> Decimal:
        name = spend_key(scope, owner, month)
        stored = await self._redis.get(name)
        deferred = sum(units for names, units in self._deferred.items() if name in names)
        return from_units(int(stored or 0) + self._pending.get(name, 0) + deferred)

    def _degrade(self, exc: RedisError) -> None:
        if not self.degraded:
            log.warning("rate_limits_degraded", error=type(exc).__name__, detail="limits open; budgets local")
        self.degraded = True

    def _recover(self) -> None:
        if self.degraded:
            log.info("rate_limits_restored")
        self.degraded = False


def _checks(
    windows: Sequence[Window], estimated_tokens: int, now_us: float, states: list[str]
) -> list[WindowCheck]:
    checks = []
    for i, window in enumerate(windows):
        tat, wait = float(states[2 * i]), float(states[2 * i + 1])
        checks.append(WindowCheck(window, cost_in(window, estimated_tokens), tat, now_us, wait))
    return checks
