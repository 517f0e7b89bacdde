"""Slots in Redis, shared by every gateway process: one key a slot, `gw:idem:<team>:<key digest>`,
changed only by one-key Lua scripts (a Cluster routes each to the key's node).

A claim is set with the lease as its TTL, an answer with the window as its TTL: a slot whose
process died frees itself when its lease ends, and nothing outlives the window.
"""

from __future__ import annotations

import structlog
from redis.exceptions import RedisError
from redis.typing import EncodableT

from gateway.idempotency.records import Claim, Record, StoredAnswer, decode_record, encode_record
from gateway.idempotency.store import StoreUnavailable
from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.idempotency")

# The slot's record, or nil once this claim is set (PX: the lease in milliseconds).
_CLAIM = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
# The answer in place of the claim that ran it, or in a slot left free (the lease ran out).
_KEEP = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class RedisIdempotencyStore:
    def __init__(self, redis: RedisClient, prefix: str = "gw:idem:") -> None:
        self._prefix = prefix
        self._claim = redis.register_script(_CLAIM)
        self._keep = redis.register_script(_KEEP)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)

    async def claim(self, slot: str, claim: Claim, lease_s: float) -> Record | None:
        try:
            held = await self._claim(keys=[self._prefix + slot], args=[encode_record(claim), _ms(lease_s)])
        except RedisError as exc:
            log.warning("idempotency_store_failed", error=type(exc).__name__)  # never the key or body
            raise StoreUnavailable from exc
        return None if held is None else decode_record(held)

    async def keep(self, slot: str, claim: Claim, answer: StoredAnswer, window_s: float) -> None:
        args: list[EncodableT] = [encode_record(claim), encode_record(answer), _ms(window_s)]
        try:
            await self._keep(keys=[self._prefix + slot], args=args)
        except RedisError as exc:  # not kept: a retry runs anew once the claim's lease ends
            log.warning("idempotency_store_failed", error=type(exc).__name__)

    async def release(self, slot: str, claim: Claim) -> None:
        try:
            await self._release(keys=[self._prefix + slot], args=[encode_record(claim)])
        except RedisError as exc:  # the claim frees itself when its lease ends
            log.warning("idempotency_store_failed", error=type(exc).__name__)

    async def renew(self, slot: str, claim: Claim, lease_s: float) -> None:
        try:
            await self._renew(keys=[self._prefix + slot], args=[encode_record(claim), _ms(lease_s)])
        except RedisError as exc:  # the next renewal may reach it; past the lease, a repeat runs
            log.warning("idempotency_store_failed", error=type(exc).__name__)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
