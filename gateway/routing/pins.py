"""Batch pins: (team, batch id) -> one deployment, placed atomically and shared by every process.

A pin may move only while it is unconfirmed (no request of the batch has succeeded yet); an idle
pin expires after `batches.idle_ttl_s`. `RedisPinStore` is the production store; `MemoryPinStore`
serves the embedded single-process default with the same semantics.
"""

from __future__ import annotations

import time
from typing import Protocol

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.errors import GatewayError
from gateway.routing.deployment import Deployment


class PinStoreUnavailable(GatewayError):
    """The shared store cannot be reached; callers degrade to rendezvous hashing."""

    status = 503


class BatchPin(msgspec.Struct, frozen=True, kw_only=True):
    team_id: str
    batch_id: str
    deployment: str
    model: str
    provider: str
    region: str
    created_at: float
    last_used_at: float
    confirmed: bool = False
    moves: int = 0


def new_pin(team_id: str, batch_id: str, deployment: Deployment, now: float) -> BatchPin:
    return BatchPin(
        team_id=team_id,
        batch_id=batch_id,
        deployment=deployment.id,
        model=deployment.model,
        provider=deployment.provider.name,
        region=deployment.region,
        created_at=now,
        last_used_at=now,
    )


class PinStore(Protocol):
    async def touch(self, team_id: str, batch_id: str) -> BatchPin | None:
        """Return the live pin and push its idle expiry back, or None."""
        ...

    async def place(self, pin: BatchPin) -> BatchPin:
        """Store `pin` unless one exists; return whichever pin is now in force."""
        ...

    async def confirm(self, team_id: str, batch_id: str) -> None: ...

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        """Move an unconfirmed pin still on `pin.deployment`; return the pin now in force."""
        ...

    async def delete(self, team_id: str, batch_id: str) -> bool: ...

    async def active_count(self) -> int: ...


class MemoryPinStore:
    def __init__(self, idle_ttl_s: float, clock: object = time.time) -> None:
        self._ttl = idle_ttl_s
        self._clock = clock if callable(clock) else time.time
        self._pins: dict[tuple[str, str], BatchPin] = {}

    def _live(self, key: tuple[str, str]) -> BatchPin | None:
        pin = self._pins.get(key)
        if pin is not None and self._clock() - pin.last_used_at > self._ttl:
            del self._pins[key]
            return None
        return pin

    async def touch(self, team_id: str, batch_id: str) -> BatchPin | None:
        pin = self._live((team_id, batch_id))
        if pin is None:
            return None
        pin = msgspec.structs.replace(pin, last_used_at=self._clock())
        self._pins[(team_id, batch_id)] = pin
        return pin

    async def place(self, pin: BatchPin) -> BatchPin:
        key = (pin.team_id, pin.batch_id)
        existing = self._live(key)
        if existing is not None:
            return existing
        self._pins[key] = pin
        return pin

    async def confirm(self, team_id: str, batch_id: str) -> None:
        pin = self._live((team_id, batch_id))
        if pin is not None and not pin.confirmed:
            self._pins[(team_id, batch_id)] = msgspec.structs.replace(pin, confirmed=True)

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        key = (pin.team_id, pin.batch_id)
        current = self._live(key)
        if current is None or current.confirmed or current.deployment != pin.deployment:
            return current or pin
        moved = msgspec.structs.replace(
            current,
            deployment=to.id,
            provider=to.provider.name,
            region=to.region,
            moves=current.moves + 1,
            last_used_at=self._clock(),
        )
        self._pins[key] = moved
        return moved

    async def delete(self, team_id: str, batch_id: str) -> bool:
        return self._pins.pop((team_id, batch_id), None) is not None

    async def active_count(self) -> int:
        now = self._clock()
        return sum(1 for p in self._pins.values() if now - p.last_used_at <= self._ttl)


# KEYS[1] pin hash, KEYS[2] index zset; ARGV: now, ttl_ms, member
_TOUCH = """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed')
if not v[1] then return false end
redis.call('HSET', KEYS[1], 'last_used', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
return {v[1], v[2] or '0', ARGV[1]}
"""
# ARGV: pin json, now, ttl_ms, member
_PLACE = """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed', 'last_used')
if v[1] then return {v[1], v[2] or '0', v[3] or ARGV[2]} end
redis.call('HSET', KEYS[1], 'pin', ARGV[1], 'last_used', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
return {ARGV[1], '0', ARGV[2]}
"""
# ARGV: expected deployment, new pin json, now, ttl_ms
_MOVE = """
local v = redis.call('HMGET', KEYS[1], 'pin', 'confirmed', 'last_used')
if not v[1] then return false end
local current = cjson.decode(v[1])
if v[2] == '1' or current['deployment'] ~= ARGV[1] then return {v[1], v[2] or '0', v[3]} end
redis.call('HSET', KEYS[1], 'pin', ARGV[2], 'last_used', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {ARGV[2], '0', ARGV[3]}
"""


class RedisPinStore:
    """Pins as Redis hashes `gw:pin:<team>:<batch>` with idle expiry, plus a zset for counting."""

    INDEX = "gw:pins"

    def __init__(self, redis: Redis, idle_ttl_s: float, prefix: str = "gw:pin:") -> None:
        self._redis = redis
        self._ttl_ms = int(idle_ttl_s * 1000)
        self._ttl_s = idle_ttl_s
        self._prefix = prefix
        self._touch = redis.register_script(_TOUCH)
        self._place = redis.register_script(_PLACE)
        self._move = redis.register_script(_MOVE)

    def _key(self, team_id: str, batch_id: str) -> str:
        return f"{self._prefix}{team_id}:{batch_id}"

    @staticmethod
    def _decode(reply: list[bytes] | None) -> BatchPin | None:
        if not reply:
            return None
        pin = msgspec.json.decode(reply[0], type=BatchPin)
        return msgspec.structs.replace(pin, confirmed=reply[1] == b"1", last_used_at=float(reply[2]))

    async def touch(self, team_id: str, batch_id: str) -> BatchPin | None:
        key = self._key(team_id, batch_id)
        try:
            reply = await self._touch(keys=[key, self.INDEX], args=[time.time(), self._ttl_ms, key])
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc
        return self._decode(reply)

    async def place(self, pin: BatchPin) -> BatchPin:
        key = self._key(pin.team_id, pin.batch_id)
        try:
            reply = await self._place(
                keys=[key, self.INDEX], args=[msgspec.json.encode(pin), pin.created_at, self._ttl_ms, key]
            )
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc
        placed = self._decode(reply)
        assert placed is not None
        return placed

    async def confirm(self, team_id: str, batch_id: str) -> None:
        try:
            await self._redis.hset(self._key(team_id, batch_id), "confirmed", "1")
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        now = time.time()
        moved = msgspec.structs.replace(
            pin,
            deployment=to.id,
            provider=to.provider.name,
            region=to.region,
            moves=pin.moves + 1,
            confirmed=False,
            last_used_at=now,
        )
        try:
            reply = await self._move(
                keys=[self._key(pin.team_id, pin.batch_id)],
                args=[pin.deployment, msgspec.json.encode(moved), now, self._ttl_ms],
            )
        except RedisError as exc:
            raise PinStoreUnavailable("batch pin store unreachable") from exc
        return self._decode(reply) or pin

    async def delete(self, team_id: str, batch_id: str) -> bool:
        key = self._key(team_id, batch_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
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
