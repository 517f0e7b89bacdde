"""RedisLimiter: rate windows, month spend and budget holds in Redis, exact across every process.

One Lua script per admission reads both month counters, the reservations in flight and every
applicable window (key and team, requests and tokens), and charges the windows and holds the
reservation's cost only if the budgets allow and all windows fit: one round trip, atomic, so a
crowd of concurrent requests cannot all squeeze through the same remainder of a budget. Window
state is one GCRA TAT per window (`gw:{team:<team>}:rate:<scope>:<id>:<kind>`, a float of
microseconds, expiring once the bucket is full again); spend is an integer count of 1e-10 USD
(`gw:{team:<team>}:spend:<scope>:<id>:<YYYY-MM>`, INCRBY, 35-day TTL). Every key of a team and
its API keys shares the team's hash tag (`redis_keys`), so each script's keys are in one Cluster slot. Each
budgeted counter has its holds, a
sorted set of `<units>:<hold id>` scored by expiry (`...:holds`), and their total (`...:held`),
which exists only once the counter was seeded from the usage records: a Redis emptied since has
none, and admission rebuilds the counter before deciding (rebuild.py). Time is Redis's own clock
(TIME) unless a clock is injected, so processes on different hosts agree. The scripts compare
numbers (Lua doubles: exact to the unit below 2^53 units, about 900,000 USD).

When Redis is unreachable, rate limits fail open (logged once) and budgets are enforced from the
last spend read plus what this process settled and holds meanwhile; the spend is added to Redis
on recovery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from decimal import Decimal
from typing import Any, cast

import structlog
from redis.exceptions import RedisError

from gateway.auth.principal import Principal
from gateway.errors import ServiceUnavailable
from gateway.limits.headers import rate_limit_headers, rate_limited
from gateway.limits.holds import HOLD_TTL_S, Hold, LocalHolds
from gateway.limits.limiter import Admission, Clock, new_hold, reserved_tokens, token_windows, used_tokens
from gateway.limits.rebuild import SpendRebuilds, SpendRecords
from gateway.limits.redis.scripts import ADMIT, SEED, SETTLE
from gateway.limits.reservation import Reservation
from gateway.limits.spend import (
    SPEND_TTL_S,
    Budget,
    MonthSpend,
    Shortfall,
    budget_refusal,
    budgets_of,
    from_units,
    month_of,
    settled_units,
    shortfall,
    spend_key,
    team_tag,
)
from gateway.limits.windows import Scope, Window, WindowCheck, cost_in, windows_for
from gateway.metering.events import UsageEvent
from gateway.redis.client import RedisClient
from gateway.redis.group_commit import PipelineBatcher

# The Redis keys: every window and month counter of a team and of its API keys carries the team's
# hash tag, so each admission or settle script's keys are in one Cluster slot.


def window_key(team: str, window: Window) -> str:
    """A window of `team` or of one of its keys, under the team's hash tag (see `team_tag`)."""
    return f"{team_tag(team)}:rate:{window.scope}:{window.owner}:{window.kind}"


def window_keys(principal: Principal, windows: Sequence[Window]) -> list[str]:
    return [window_key(principal.team_id, window) for window in windows]


def spend_keys(principal: Principal, month: str) -> tuple[str, str]:
    """The month counters of the principal's key and team, in that order."""
    team = principal.team_id
    return spend_key("key", principal.key_id, month, team), spend_key("team", team, month)


def held_key(counter: str) -> str:
    return f"{counter}:held"


def holds_key(counter: str) -> str:
    return f"{counter}:holds"


def counter_keys(counter: str) -> list[str]:
    return [counter, held_key(counter), holds_key(counter)]


log = structlog.get_logger("gateway.limits")


async def _nothing() -> None:
    return None


def _units(raw: str | bytes) -> int:
    """A counter as Redis returned it; what no script writes (a hand-edited key) counts as 0."""
    try:
        return int(raw)
    except ValueError:
        return 0


DEFERRED_SPEND_S = 0.5  # how long the spend of callers no budget binds is summed before it is written
SCOPES: tuple[Scope, Scope] = ("key", "team")


class RedisLimiter:
    def __init__(
        self,
        redis: RedisClient,
        clock: Clock | None = None,
        wall_clock: Clock | None = None,
        batcher: PipelineBatcher | None = None,
        records: SpendRecords | None = None,
        hold_ttl_s: float = HOLD_TTL_S,
    ) -> None:
        """`clock` None: windows run on Redis's TIME; `wall_clock` names the month (default time.time).
        `records`: where a counter not seeded yet is rebuilt from (None: every counter is trusted)."""
        self._redis = redis
        self._clock = clock
        self._wall = wall_clock or clock or time.time
        self._hold_ttl_s = hold_ttl_s
        self._admit_script = redis.register_script(ADMIT)
        self._settle = redis.register_script(SETTLE)
        self._seed_script = redis.register_script(SEED)
        self._batcher = batcher or PipelineBatcher(redis)  # settles of the same moment share a round trip
        self._rebuilds = None if records is None else SpendRebuilds(records, self._seed)
        self._known: dict[str, int] = {}  # spend counters as last read from Redis
        self._pending: dict[str, int] = {}  # spend settled while Redis was unreachable
        self._local_holds = LocalHolds()  # holds placed while Redis was unreachable
        # Spend of callers whom no budget binds, summed per pair of counters until the next write
        self._deferred: dict[tuple[str, str], int] = {}
        self._deferred_write: asyncio.TimerHandle | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self.degraded = False

    def _now_arg(self) -> str:
        return "" if self._clock is None else repr(self._clock() * 1e6)

    async def admit(self, principal: Principal, reservation: Reservation) -> Admission:
        if principal.unlimited and not self._pending:
            return Admission(reservation)  # nothing to check: spare Redis the round trip
        now = self._wall()
        month = month_of(now)
        budgets = budgets_of(principal, month)
        windows = windows_for(principal)
        hold = new_hold(budgets, reservation)
        names = spend_keys(principal, month)
        keys = [*counter_keys(names[0]), *counter_keys(names[1]), *window_keys(principal, windows)]
        args = self._admit_args(budgets, reservation, hold, windows)
        try:
            await self._flush_pending()
            reply = [item.decode() for item in await self._admit_script(keys=keys, args=args)]
            if reply[0] == "cold" and self._rebuilds is not None:
                cold = {SCOPES[int(s) - 1] for s in reply[6:]}
                await self._rebuilds.rebuild([b for b in budgets if b.scope in cold], now)
                reply = [item.decode() for item in await self._admit_script(keys=keys, args=args)]
        except RedisError as exc:
            self._degrade(exc)
            return self._admit_locally(budgets, reservation, now)
        self._recover()
        return self._admitted(reply, names, budgets, windows, reservation, hold, now)

    def _admit_args(
        self, budgets: list[Budget], reservation: Reservation, hold: Hold | None, windows: list[Window]
    ) -> list[str]:
        units = {budget.scope: str(budget.units) for budget in budgets}
        args = [
            self._now_arg(),
            "" if hold is None else hold.member,
            repr(self._hold_ttl_s * 1e6),
            "" if self._rebuilds is None else "1",
            units.get("key", ""),
            units.get("team", ""),
            str(reservation.units),
            str(SPEND_TTL_S),
        ]
        for window in windows:
            args += [str(window.limit), str(cost_in(window, reservation.tokens))]
        return args

    def _admitted(
        self,
        reply: list[str],
        names: tuple[str, str],
        budgets: list[Budget],
        windows: list[Window],
        reservation: Reservation,
        hold: Hold | None,
        now: float,
    ) -> Admission:
        status, now_us, key_spent, key_held, team_spent, team_held, *rest = reply
        if status == "cold":  # emptied again while it was being rebuilt
            raise ServiceUnavailable(
                "Budgets cannot be checked right now: their counters are being rebuilt. Retry shortly.",
                headers={"retry-after": "1"},
            )
        spent = {"key": _units(key_spent), "team": _units(team_spent)}
        held = {"key": _units(key_held), "team": _units(team_held)}
        self._known[names[0]], self._known[names[1]] = spent["key"], spent["team"]
        if status == "quota":
            scope, why = SCOPES[int(rest[0]) - 1], cast(Shortfall, rest[1])
            budget = next(b for b in budgets if b.scope == scope)
            raise budget_refusal(budget, why, spent[scope], held[scope], reservation.units, now)
        checks = _checks(windows, reservation.tokens, float(now_us), rest)
        if status == "limited":
            raise rate_limited(checks)
        return Admission(reservation, rate_limit_headers(checks), hold)

    def _admit_locally(self, budgets: list[Budget], reservation: Reservation, now: float) -> Admission:
        """Redis is down: no rate limits (fail open), budgets from what this process knows."""
        for budget in budgets:
            spent = self._known.get(budget.counter, 0) + self._pending.get(budget.counter, 0)
            held = self._local_holds.held(budget.counter, now)
            why = shortfall(budget.units, spent, held, reservation.units)
            if why is not None:
                raise budget_refusal(budget, why, spent, held, reservation.units, now)
        hold = new_hold(budgets, reservation, local=True)
        if hold is not None:
            self._local_holds.place(hold, now + self._hold_ttl_s)
        return Admission(reservation, {}, hold)

    async def _seed(self, counter: str, units: int) -> None:
        await self._seed_script(keys=counter_keys(counter), args=[str(units), str(SPEND_TTL_S)])

    def settle(self, principal: Principal, event: UsageEvent, admission: Admission | None) -> Awaitable[None]:
        """Queued before this returns, so that it shares the round trip of the usage append its
        caller makes next; the awaitable is its outcome.

        A caller whom no window or budget binds (`Principal.unlimited`) has nothing to settle now:
        its spend is only kept for a budget set later. It is summed here and written every
        `DEFERRED_SPEND_S` (one command per key and team, not one per request); a process that
        dies first loses at most that much, which the start-up reconcile restores from the usage
        records."""
        month = month_of(event.created_at)
        names = (
            spend_key("key", event.key_id, month, event.team_id),
            spend_key("team", event.team_id, month),
        )
        units = settled_units(event.cost)
        hold = self._redis_hold(admission)
        if principal.unlimited and hold is None:
            self._defer(names, units)
            return _nothing()
        return self._apply(principal, names, units, used_tokens(event) - reserved_tokens(admission), hold)

    def _redis_hold(self, admission: Admission | None) -> Hold | None:
        """The admission's hold if it is in Redis; one held in this process ends here."""
        hold = None if admission is None else admission.hold
        if hold is not None and hold.local:
            self._local_holds.release(hold)
            return None
        return hold

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

    async def release(self, principal: Principal, admission: Admission) -> None:
        names = spend_keys(principal, month_of(self._wall()))
        await self._apply(principal, names, 0, -admission.reservation.tokens, self._redis_hold(admission))

    def _apply(
        self, principal: Principal, names: tuple[str, str], units: int, delta: int, hold: Hold | None
    ) -> Awaitable[None]:
        windows = token_windows(principal) if delta else []
        if not units and not windows and hold is None:
            return _nothing()
        held = [] if hold is None else [k for c in hold.counters for k in (held_key(c), holds_key(c))]
        keys, limits = [*names, *held, *window_keys(principal, windows)], [w.limit for w in windows]
        return self._settle_counters(names, keys, limits, units, delta, hold)

    def _settle_counters(
        self,
        names: tuple[str, str],
        keys: list[str],
        limits: list[int],
        units: int,
        delta: int,
        hold: Hold | None = None,
    ) -> Awaitable[None]:
        if self._pending:  # what was settled during an outage goes to Redis first
            return self._apply_after_outage(names, keys, limits, units, delta, hold)
        return self._applied(names, units, self._queue_settle(keys, limits, units, delta, hold))

    async def _apply_after_outage(
        self,
        names: tuple[str, str],
        keys: list[str],
        limits: list[int],
        units: int,
        delta: int,
        hold: Hold | None,
    ) -> None:
        try:
            await self._flush_pending()
        except RedisError as exc:
            self._failed(exc, names, units)
            return
        await self._applied(names, units, self._queue_settle(keys, limits, units, delta, hold))

    async def _applied(self, names: tuple[str, str], units: int, reply: Awaitable[Any]) -> None:
        try:
            await reply
        except RedisError as exc:
            self._failed(exc, names, units)  # a hold it should have ended expires on its own
            return
        self._recover()
        for name in names if units else ():
            self._known[name] = self._known.get(name, 0) + units

    def _failed(self, exc: RedisError, names: tuple[str, str], units: int) -> None:
        self._degrade(exc)
        for name in names if units else ():
            self._pending[name] = self._pending.get(name, 0) + units

    def _queue_settle(
        self, keys: list[str], limits: list[int], units: int, delta: int, hold: Hold | None
    ) -> Awaitable[Any]:
        """The settles of the same counters queued before the next round trip go out as one script
        call with their spend and token corrections summed and their holds listed
        (`gateway.redis.group_commit`): under load, one command per key and round trip instead of
        one per request."""
        held_n = 0 if hold is None else len(hold.counters)

        def keys_and_args(items: list[tuple[int, int, str | None]]) -> tuple[list[str], list[str]]:
            total_units, total_delta = sum(u for u, _, _ in items), sum(d for _, d, _ in items)
            members = [m for _, _, m in items if m is not None]
            args = [self._now_arg(), str(total_units), str(SPEND_TTL_S), str(total_delta)]
            return keys, [*args, str(held_n), str(len(members)), *members, *map(str, limits)]

        item = (units, delta, None if hold is None else hold.member)
        return self._batcher.merge_script(self._settle, (*keys, *limits), item, keys_and_args)

    async def _flush_pending(self) -> None:
        """Add the spend settled during an outage to Redis, once it answers again: one transaction
        per team (a Cluster runs a transaction in one slot only), so each team's counters are added
        whole or not at all, and what was not added stays pending."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}  # taken before awaiting: flushed once only
        by_team: dict[str, dict[str, int]] = {}
        for name, units in pending.items():
            by_team.setdefault(name.partition("}")[0], {})[name] = units  # up to the end of its tag
        teams = list(by_team.values())
        for flushed, counters in enumerate(teams):
            try:
                async with self._redis.pipeline(transaction=True) as pipe:
                    for name, units in counters.items():
                        pipe.incrby(name, units)
                        pipe.expire(name, SPEND_TTL_S)
                    await pipe.execute()
            except RedisError:
                for left in teams[flushed:]:
                    for name, units in left.items():
                        self._pending[name] = self._pending.get(name, 0) + units
                raise
        log.info("spend_outage_flushed", counters=len(pending))

    async def reconcile(self, spend: MonthSpend) -> None:
        """Seed every counter through the group commit: pipelined round trips, and against a Cluster
        each seed goes to the node of its team's slot."""
        await self._write_deferred_now()  # the counters to compare with the records are whole

        def seed(name: str, units: int) -> Awaitable[Any]:
            args = [str(units), str(SPEND_TTL_S)]
            return self._batcher.merge_script(
                self._seed_script, ("seed", name), None, lambda _: (counter_keys(name), args)
            )

        await asyncio.gather(*(seed(name, units) for name, units in spend.counters().items()))

    async def spent_usd(self, scope: Scope, owner: str, month: str, team: str | None = None) -> Decimal:
        name = spend_key(scope, owner, month, team)
        stored = await self._redis.get(name)
        deferred = sum(units for names, units in self._deferred.items() if name in names)
        return from_units(_units(stored or b"0") + self._pending.get(name, 0) + deferred)

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
