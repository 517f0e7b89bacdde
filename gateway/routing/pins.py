"""Batch pins: (team, batch id) -> one deployment, placed atomically and shared by every process.

A pin may move only while it is unconfirmed (no request of the batch has succeeded yet); an idle
pin expires after `batches.idle_ttl_s`. A pin's `created_at` is the arrival time of the earliest
request that joined it, so the batch's running totals (records since `created_at`) count every
one. `RedisPinStore` is the production store; `MemoryPinStore` serves the embedded
single-process default with the same semantics. The pin itself is `gateway.routing.batch_pin`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import msgspec
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError
from redis.typing import EncodableT

from gateway.redis.client import RedisClient
from gateway.redis.urls import Durability
from gateway.routing.batch_pin import BatchPin, PinStoreUnavailable, moved_pin
from gateway.routing.deployment import Deployment

log = structlog.get_logger("gateway.pins")


class PinStore(Protocol):
    async def touch(
        self, team_id: str, batch_id: str, joined_at: float | None = None, *, recent: bool = True
    ) -> BatchPin | None:
        """Return the live pin and push its idle expiry back, or None.

        `joined_at`: the arrival time of the request joining the batch (None for a mere read).
        `recent=False`: ask the shared store itself, not a copy this process read a moment ago.
        """
        ...

    async def place(self, pin: BatchPin) -> BatchPin:
        """Store `pin` unless one exists; return whichever pin is now in force."""
        ...

    async def confirm(self, team_id: str, batch_id: str, deployment: str) -> None:
        """Make the pin final (a request succeeded on it), if it is still on `deployment`."""
        ...

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        """Move an unconfirmed pin still on `pin.deployment`; return the pin now in force."""
        ...

    async def delete(self, team_id: str, batch_id: str) -> bool: ...

    async def active_count(self) -> int: ...


class MemoryPinStore:
    def __init__(self, idle_ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self._ttl = idle_ttl_s
        self._clock = clock
        self._pins: dict[tuple[str, str], BatchPin] = {}

    def _live(self, key: tuple[str, str]) -> BatchPin | None:
        pin = self._pins.get(key)
        if pin is not None and self._clock() - pin.last_used_at > self._ttl:
            del self._pins[key]
            return None
        return pin

    def _use(self, pin: BatchPin, joined_at: float | None) -> BatchPin:
        created = pin.created_at if joined_at is None else min(pin.created_at, joined_at)
        used = msgspec.structs.replace(pin, last_used_at=self._clock(), created_at=created)
        self._pins[(pin.team_id, pin.batch_id)] = used
        return used

    async def touch(
        self, team_id: str, batch_id: str, joined_at: float | None = None, *, recent: bool = True
    ) -> BatchPin | None:
        pin = self._live((team_id, batch_id))
        return None if pin is None else self._use(pin, joined_at)

    async def place(self, pin: BatchPin) -> BatchPin:
        existing = self._live((pin.team_id, pin.batch_id))
        if existing is not None:
            return self._use(existing, pin.created_at)
        self._pins[(pin.team_id, pin.batch_id)] = pin
        return pin

    async def confirm(self, team_id: str, batch_id: str, deployment: str) -> None:
        pin = self._live((team_id, batch_id))
        if pin is not None and not pin.confirmed and pin.deployment == deployment:
            self._pins[(team_id, batch_id)] = msgspec.structs.replace(pin, confirmed=True)

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        key = (pin.team_id, pin.batch_id)
        current = self._live(key)
        if current is None or current.confirmed or current.deployment != pin.deployment:
            return current or pin
        moved = msgspec.structs.replace(moved_pin(current, to), last_used_at=self._clock())
        self._pins[key] = moved
        return moved

    async def delete(self, team_id: str, batch_id: str) -> bool:
        return self._pins.pop((team_id, batch_id), None) is not None

    async def active_count(self) -> int:
        now = self._clock()
        return sum(1 for p in self._pins.values() if now - p.last_used_at <= self._ttl)


# A pin is a hash: `pin` (the JSON of the fixed part), `confirmed`, `last_used`, `created`.
# Every script answers {pin json, confirmed, last_used, created} or false. `_JOIN` lowers `created`
# to a joining request's arrival time (pins written before `created` existed fall back to the JSON).
_JOIN = """
local function join(key, v, joined)
  local created = v[3] or tostring(cjson.decode(v[1])['created_at'])
  if joined ~= '' and tonumber(joined) < tonumber(created) then
    created = joined
    redis.call('HSET', key, 'created', created)
  end
  return created
end
"""
# Each script touches the pin's own hash only (one key, so any Cluster slot); the index of live pins
# is another key, in another slot, written beside it.
# KEYS[1] pin hash; ARGV: now, ttl_ms, joined_at or ''
_TOUCH = (
    _JOIN
    + """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed', 'created')
if not v[1] then return false end
local created = join(KEYS[1], v, ARGV[3])
redis.call('HSET', KEYS[1], 'last_used', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {v[1], v[2] or '0', ARGV[1], created}
"""
)
# KEYS[1] pin hash; ARGV: pin json, created (its arrival time), ttl_ms, now
_PLACE = (
    _JOIN
    + """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed', 'created')
local created = ARGV[2]
if v[1] then
  created = join(KEYS[1], v, ARGV[2])
else
  v = {ARGV[1], '0'}
  redis.call('HSET', KEYS[1], 'pin', ARGV[1], 'confirmed', '0', 'created', created)
end
redis.call('HSET', KEYS[1], 'last_used', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {v[1], v[2] or '0', ARGV[4], created}
"""
)
# KEYS[1] pin hash; ARGV: deployment
_CONFIRM = """
local v = redis.call('HGET', KEYS[1], 'pin')
if v and cjson.decode(v)['deployment'] == ARGV[1] then redis.call('HSET', KEYS[1], 'confirmed', '1') end
return 0
"""
# KEYS[1] pin hash; ARGV: expected deployment, new pin json, now, ttl_ms
_MOVE = (
    _JOIN
    + """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed', 'created')
if not v[1] then return false end
local created = join(KEYS[1], v, '')
if v[2] == '1' or cjson.decode(v[1])['deployment'] ~= ARGV[1] then
  return {v[1], v[2] or '0', redis.call('HGET', KEYS[1], 'last_used') or ARGV[3], created}
end
redis.call('HSET', KEYS[1], 'pin', ARGV[2], 'last_used', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {ARGV[2], '0', ARGV[3], created}
"""
)


class RedisPinStore:
    """Pins as Redis hashes `gw:pin:{<team>:<batch>}` with idle expiry, plus a zset for counting.

    Every change is one Lua script on the pin's one key, so concurrent requests in any process see
    one answer; the zset of live pins (`gw:pins`, scored by last use) is updated beside it, and
    only counts. With `durability`, a placement, move or confirmation is followed by WAIT on its
    connection: a failover then keeps it unless no replica had it in time, and a pin lost that way
    is placed again where the first one was (placement is a rendezvous choice), unless circuits
    changed meanwhile.
    """

    INDEX = "gw:pins"

    CACHE_LIMIT = 10_000

    def __init__(
        self,
        redis: RedisClient,
        idle_ttl_s: float,
        prefix: str = "gw:pin:",
        confirmed_cache_s: float = 1.0,
        durability: Durability | None = None,
    ) -> None:
        self._redis = redis
        self._durability = durability or Durability()
        # A confirmed pin never moves, so a process may reuse what it read for a moment: one
        # Redis round trip per batch per second instead of one per request. Only a DELETE from
        # another process is seen up to `confirmed_cache_s` late.
        self._cache_s = confirmed_cache_s
        self._confirmed: dict[str, tuple[BatchPin, float]] = {}
        self._ttl_ms = max(1, int(idle_ttl_s * 1000))
        self._ttl_s = idle_ttl_s
        self._prefix = prefix
        self._touch = redis.register_script(_TOUCH)
        self._place = redis.register_script(_PLACE)
        self._confirm = redis.register_script(_CONFIRM)
        self._move = redis.register_script(_MOVE)

    def _key(self, team_id: str, batch_id: str) -> str:
        return f"{self._prefix}{{{team_id}:{batch_id}}}"

    @staticmethod
    def _decode(reply: list[bytes] | None) -> BatchPin | None:
        if not reply:
            return None
        pin = msgspec.json.decode(reply[0], type=BatchPin)
        return msgspec.structs.replace(
            pin, confirmed=reply[1] == b"1", last_used_at=float(reply[2]), created_at=float(reply[3])
        )

    async def _run(
        self,
        script: AsyncScript,
        key: str,
        args: list[EncodableT],
        *,
        index: Literal["add", "refresh"] | None = None,
        durable: bool = False,
    ) -> Any:
        """The script's reply on the pin `key`: a pin's fields, nil, or a number (CONFIRM).
        `index`: note the pin's use in the index too ("refresh": only if listed, as a touch of no
        pin must not list one); `durable`: wait for the replicas after it."""
        try:
            if index is not None:
                listed = self._redis.zadd(self.INDEX, {key: time.time()}, xx=index == "refresh")
                reply, _ = await asyncio.gather(self._script(script, key, args, durable), listed)
            else:
                reply = await self._script(script, key, args, durable)
        except RedisError as exc:
            log.warning("pin_store_failed", error=type(exc).__name__)  # the class only: no key names
            raise PinStoreUnavailable("batch pin store unreachable") from exc
        return reply

    async def _script(self, script: AsyncScript, key: str, args: list[EncodableT], durable: bool) -> Any:
        if not (durable and self._durability.waits) or isinstance(self._redis, RedisCluster):
            return await script(keys=[key], args=args)
        # WAIT counts the writes of its own connection: the script and it share one pipeline's.
        async with self._redis.pipeline(transaction=False) as pipe:
            await script(keys=[key], args=args, client=pipe)
            pipe.execute_command("WAIT", self._durability.min_replicas, self._durability.replica_timeout_ms)
            reply, acknowledged = await pipe.execute()
        if int(acknowledged) < self._durability.min_replicas:
            # Kept all the same: a pin lost in a failover is placed again by the same rendezvous choice.
            log.warning("pin_not_replicated", acknowledged=int(acknowledged))
        return reply

    async def touch(
        self, team_id: str, batch_id: str, joined_at: float | None = None, *, recent: bool = True
    ) -> BatchPin | None:
        key = self._key(team_id, batch_id)
        cached = self._confirmed.get(key) if recent else None
        if cached is not None:
            known, read_at = cached
            fresh = time.monotonic() - read_at < self._cache_s
            if fresh and (joined_at is None or joined_at >= known.created_at):
                return known
        joined = "" if joined_at is None else repr(joined_at)
        reply = await self._run(self._touch, key, [repr(time.time()), self._ttl_ms, joined], index="refresh")
        pin = self._decode(reply)
        self._remember(key, pin)
        return pin

    def _remember(self, key: str, pin: BatchPin | None) -> None:
        if pin is None or not pin.confirmed:
            self._confirmed.pop(key, None)
            return
        if len(self._confirmed) >= self.CACHE_LIMIT:
            self._confirmed.clear()
        self._confirmed[key] = (pin, time.monotonic())

    async def place(self, pin: BatchPin) -> BatchPin:
        key = self._key(pin.team_id, pin.batch_id)
        args: list[EncodableT] = [
            msgspec.json.encode(pin),
            repr(pin.created_at),
            self._ttl_ms,
            repr(time.time()),
        ]
        reply = await self._run(self._place, key, args, index="add", durable=True)
        placed = self._decode(reply)
        assert placed is not None
        return placed

    async def confirm(self, team_id: str, batch_id: str, deployment: str) -> None:
        # Durable too: a confirmation lost in a failover would let a later failure move the pin.
        await self._run(self._confirm, self._key(team_id, batch_id), [deployment], durable=True)

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        now = time.time()
        moved = moved_pin(pin, to)
        args: list[EncodableT] = [pin.deployment, msgspec.json.encode(moved), repr(now), self._ttl_ms]
        reply = await self._run(self._move, self._key(pin.team_id, pin.batch_id), args, durable=True)
        return self._decode(reply) or pin

    async def delete(self, team_id: str, batch_id: str) -> bool:
        key = self._key(team_id, batch_id)
        self._confirmed.pop(key, None)
        try:
            # Two keys in two slots: no transaction; an index member left behind only counts until trimmed.
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(key)
                pipe.zrem(self.INDEX, key)
                deleted, _ = await pipe.execute()
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc
        return bool(deleted)

    async def active_count(self) -> int:
        cutoff = time.time() - self._ttl_s
        try:
            await self._redis.zremrangebyscore(self.INDEX, "-inf", cutoff)
            return int(await self._redis.zcard(self.INDEX))
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc
