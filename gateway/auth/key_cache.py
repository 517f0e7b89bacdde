"""Team key verification with a per-process cache, so the database is not asked on every request.

Keys the database has are cached by key hash for `ttl_s`; hashes it has not, for `unknown_ttl_s`,
apart and bounded on their own, so a flood of made-up keys costs at most one query per distinct
key per TTL and never pushes a real key out. Concurrent misses for one hash share a single query;
when the database is down, known keys are served from the stale cache. Revocation reaches every
process at once through a Redis channel, with the TTL as the backstop without Redis. The query
itself is injected (`gateway.db.keys.key_state_loader` where services are built).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import structlog
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from gateway.auth.bearer import bearer_token
from gateway.auth.principal import KeyState, Principal
from gateway.auth.secrets import KEY_SCHEME, hash_secret
from gateway.errors import AuthenticationFailed, ServiceUnavailable
from gateway.redis.client import RedisClient

INVALIDATION_CHANNEL = "gateway:keys:invalidate"
DATABASE_DOWN = (SQLAlchemyError, OSError, TimeoutError)
MAX_SECRET_LENGTH = 256

log = structlog.get_logger(__name__)

KeyLoader = Callable[[str], Awaitable[KeyState | None]]
"""Reads the key with a hash, and its team, from the database; None when no key has that hash."""


@dataclass(slots=True)
class _Entry:
    state: KeyState
    loaded_at: float  # monotonic seconds


class KeyCache:
    def __init__(
        self,
        load_key: KeyLoader,
        ttl_s: float = 5.0,
        redis: RedisClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall_clock: Callable[[], float] = time.time,
        channel: str = INVALIDATION_CHANNEL,
        max_entries: int = 100_000,
        unknown_ttl_s: float = 5.0,
        max_unknown: int = 100_000,
        query_timeout_s: float = 3.0,
        reconnect_delay_s: float = 1.0,
    ) -> None:
        self._load_key = load_key
        self._ttl_s = ttl_s
        self._redis = redis
        self._clock = clock
        self._wall_clock = wall_clock
        self._channel = channel
        self._max_entries = max_entries
        self._unknown_ttl_s = unknown_ttl_s
        self._max_unknown = max_unknown
        self._query_timeout_s = query_timeout_s
        self._reconnect_delay_s = reconnect_delay_s
        self._entries: dict[str, _Entry] = {}
        # Hashes no key has -> when the database said so; oldest first, which is also first to expire.
        self._unknown: dict[str, float] = {}
        self._inflight: dict[str, asyncio.Future[KeyState | None]] = {}
        # Bumped by every eviction: a query that started before it must not cache its answer.
        self._generation = 0
        self.subscribed = asyncio.Event()  # set while the invalidation listener is subscribed

    async def authenticate(self, authorization_header: str | None) -> Principal:
        """The caller behind a Bearer header; AuthenticationFailed (401) or ServiceUnavailable (503)."""
        secret = bearer_token(authorization_header)
        if not secret.startswith(KEY_SCHEME) or len(secret) > MAX_SECRET_LENGTH:
            raise AuthenticationFailed("Invalid API key.")  # not one of ours: no query needed
        return self._admit(await self.lookup(hash_secret(secret)))

    async def verify(self, key_hash: str) -> Principal:
        """`authenticate` for a caller that holds the key's hash, not the key (a console session)."""
        return self._admit(await self.lookup(key_hash))

    @property
    def unknown_hashes(self) -> int:
        """How many hashes are remembered as belonging to no key."""
        return len(self._unknown)

    @property
    def known_keys(self) -> int:
        """How many keys are cached: those still authenticated while the database is unreachable."""
        return len(self._entries)

    async def lookup(self, key_hash: str) -> KeyState | None:
        now = self._clock()
        entry = self._entries.get(key_hash)
        if entry is not None and now - entry.loaded_at < self._ttl_s:
            return entry.state
        learned = self._unknown.get(key_hash)
        if learned is not None and now - learned < self._unknown_ttl_s:
            return None
        try:
            return await self._load(key_hash)
        except DATABASE_DOWN as exc:
            return self._stale(key_hash, exc)

    async def invalidate(self, key_hash: str) -> None:
        """Forget a key here and, through Redis, in every other process."""
        self.evict(key_hash)
        if self._redis is not None:
            await publish_invalidation(self._redis, key_hash, self._channel)

    def evict(self, key_hash: str) -> None:
        self._generation += 1
        self._entries.pop(key_hash, None)
        self._unknown.pop(key_hash, None)
        self._inflight.pop(key_hash, None)

    async def run_invalidation_listener(self) -> None:
        """Evict the hashes other processes publish; runs until cancelled, reconnecting as needed."""
        if self._redis is None:
            return
        while True:
            try:
                # A Cluster client learns the slot map on its first command, and its pub/sub
                # (on the node of the channel's slot) needs the map: a ping first.
                await self._redis.ping()
                async with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._channel)
                    self._expire_all()  # invalidations sent while nobody listened are lost
                    self.subscribed.set()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            data = message["data"]
                            self.evict(data.decode() if isinstance(data, bytes) else str(data))
            except (RedisError, OSError) as exc:
                self.subscribed.clear()
                log.warning("key_cache.listener_disconnected", error=type(exc).__name__)
                await asyncio.sleep(self._reconnect_delay_s)

    def _admit(self, state: KeyState | None) -> Principal:
        if state is None:
            raise AuthenticationFailed("Invalid API key.")
        if state.revoked:
            raise AuthenticationFailed("This API key has been revoked.", code="api_key_revoked")
        if state.team_deleted:
            raise AuthenticationFailed("The team of this API key has been deleted.", code="api_key_revoked")
        if state.principal.expired(self._wall_clock()):
            raise AuthenticationFailed("This API key has expired.", code="api_key_expired")
        return state.principal

    async def _load(self, key_hash: str) -> KeyState | None:
        """One query per hash at a time; the shield keeps a cancelled caller from cancelling it."""
        pending = self._inflight.get(key_hash)
        if pending is None:
            pending = asyncio.ensure_future(self._query(key_hash))
            self._inflight[key_hash] = pending
            pending.add_done_callback(partial(self._settled, key_hash))
        return await asyncio.shield(pending)

    async def _query(self, key_hash: str) -> KeyState | None:
        generation = self._generation
        async with asyncio.timeout(self._query_timeout_s):
            state = await self._load_key(key_hash)
        if generation == self._generation:
            self._store(key_hash, state)
        return state

    def _settled(self, key_hash: str, future: asyncio.Future[KeyState | None]) -> None:
        if self._inflight.get(key_hash) is future:
            del self._inflight[key_hash]
        if not future.cancelled():
            future.exception()  # retrieved here, so an unawaited failure is not logged as lost

    def _store(self, key_hash: str, state: KeyState | None) -> None:
        self._entries.pop(key_hash, None)
        self._unknown.pop(key_hash, None)
        if state is None:
            self._unknown[key_hash] = self._clock()
            while len(self._unknown) > self._max_unknown:  # made-up keys cannot grow memory without bound
                del self._unknown[next(iter(self._unknown))]
            return
        self._entries[key_hash] = _Entry(state, self._clock())
        while len(self._entries) > self._max_entries:  # oldest first
            del self._entries[next(iter(self._entries))]

    def _stale(self, key_hash: str, exc: BaseException) -> KeyState | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            log.warning("key_cache.database_unavailable", error=type(exc).__name__)
            raise ServiceUnavailable(
                "API keys cannot be verified right now: the gateway's database is unreachable. Retry shortly."
            ) from exc
        log.warning("key_cache.serving_stale", key_prefix=entry.state.principal.key_prefix)
        entry.loaded_at = self._clock()  # serve it a full TTL before paying for another failed query
        return entry.state

    def _expire_all(self) -> None:
        self._generation += 1
        self._unknown.clear()
        for entry in self._entries.values():
            entry.loaded_at = -math.inf


async def publish_invalidation(
    redis: RedisClient, key_hash: str, channel: str = INVALIDATION_CHANNEL
) -> None:
    """Tell every gateway process to forget a key; if Redis is down, their TTL does it later."""
    try:
        await redis.publish(channel, key_hash)
    except (RedisError, OSError) as exc:
        log.warning("key_cache.publish_failed", error=type(exc).__name__)
