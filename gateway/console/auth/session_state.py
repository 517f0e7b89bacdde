"""The console's sessions, kept on the server: one record per signed-in browser, under the random id
that is all its cookie holds. In Redis when the gateway has it, so that every process sees a sign-in
and a sign-out at once; in this process's memory otherwise (the single-process default: several
workers need Redis, gateway.commands.preflight).

Litestar's stores hold the records (`RedisStore`, `MemoryStore`); its session middleware does not
serve here, for three reasons: the console's cookie is named and scoped by the request's scheme
(`__Host-gateway_console`, Secure, over https; `gateway_console` for /ui over plain http) where the
middleware's is fixed; a session lasts a fixed time from its sign-in, where the middleware writes
the record and the cookie again with every response; and only the pages that declare the viewer
read a session, not the static files and the sign-in form beside them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar, cast

import msgspec
import structlog
from litestar.stores.base import Store
from litestar.stores.memory import MemoryStore
from litestar.stores.redis import RedisStore
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.console")

NAMESPACE = "gateway:console:session"  # records are `gateway:console:session:<id>`
STORE_ERRORS = (RedisError, OSError)
T = TypeVar("T")


class SessionsUnavailable(Exception):
    """The session store (Redis) did not answer: no session can be started, read or ended now."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who a session is: the admin, or a team key named by its id (never the key, nor its hash)."""

    expires_at: int  # unix seconds; the record is refused from then on (the store also drops it)
    seal: str  # under the console secret: gateway.console.auth.sessions
    key_id: str | None = None  # a team session's key
    team_id: str | None = None  # and its team

    @property
    def admin(self) -> bool:
        return self.key_id is None


class SessionStore:
    """Session records by id, in one of Litestar's stores."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @classmethod
    def of(cls, redis: RedisClient | None) -> SessionStore:
        if redis is None:
            return cls(MemoryStore())
        # RedisStore is typed for a single server's client; it sends a Cluster client the same
        # one-key GET, SET and DEL, which the Cluster routes by the key's slot.
        return cls(RedisStore(cast(Redis, redis), namespace=NAMESPACE))

    async def put(self, sid: str, record: SessionRecord, ttl_s: int) -> None:
        if isinstance(self._store, MemoryStore):
            await self._store.delete_expired()  # a memory store forgets only what it is asked for
        await self._call(self._store.set(sid, msgspec.json.encode(record), expires_in=max(ttl_s, 1)))

    async def get(self, sid: str) -> SessionRecord | None:
        raw = await self._call(self._store.get(sid))
        if raw is None:
            return None
        try:
            return msgspec.json.decode(raw, type=SessionRecord)
        except msgspec.DecodeError:
            return None

    async def delete(self, sid: str) -> None:
        await self._call(self._store.delete(sid))

    @staticmethod
    async def _call(operation: Awaitable[T]) -> T:
        try:
            return await operation
        except STORE_ERRORS as exc:
            log.warning("console_sessions_unavailable", error=type(exc).__name__)
            raise SessionsUnavailable from exc
