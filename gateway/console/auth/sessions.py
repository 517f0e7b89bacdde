"""Who is looking at a console page: the session its cookie names, checked on every request.

A sign-in stores a session record (gateway.console.auth.session_state) under a random id, and the
cookie holds that id and nothing else. A page's `viewer` dependency reads the record, checks its
expiry and its seal, and re-checks its key through the key cache (a cheap in-memory hit most of the
time), so a session ends as soon as it signs out (in every process, through Redis), its key is
revoked, expires or its team is deleted; an admin session ends when the admin key changes. Admin
pages depend on `admin` instead, which refuses a team's session.

The seal is an HMAC under the console secret of the record and whom it names (the admin key, for
an admin session): a record that someone wrote into the store without the secret, or one from
before the secret or the admin key changed, names nobody. The same secret makes each session's
CSRF token (gateway.console.auth.forgery).

The cookie is `__Host-gateway_console` when the console is served over https: a browser takes a
cookie of that name only if it is Secure, for Path=/ and without a Domain, so no other host (a
subdomain) and no plain-http page can set or shadow it. Over plain http (a gateway on localhost)
such a cookie would be refused, so it is `gateway_console`, for Path=/ui. Which scheme a request
came over is the server's to say (https to the gateway, or to a trusted proxy that says so:
gateway.server.forwarded), never a header any client can send.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from litestar import Request, Response
from litestar.di import NamedDependency, Provide
from litestar.params import SkipValidation

from gateway.auth.principal import Principal
from gateway.auth.secrets import constant_time_equals
from gateway.console.auth.session_state import SessionRecord, SessionStore
from gateway.db import keys
from gateway.errors import AuthenticationFailed, NotFound
from gateway.redis.client import RedisClient
from gateway.services import Services, ServicesDependency
from gateway.settings import Settings

COOKIE = "gateway_console"  # over plain http
COOKIE_PATH = "/ui"
SECURE_COOKIE = "__Host-gateway_console"  # over https; the prefix requires Path=/
SECURE_COOKIE_PATH = "/"
# The derivation's label: a secret derived from the admin key is good for nothing else.
DERIVATION_LABEL = b"gateway console session secret v1"
SESSION_ID_BYTES = 32
# What a session id looks like (token_urlsafe of SESSION_ID_BYTES); anything else is not looked up.
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
MAX_KEY_IDS = 10_000  # key id -> hash, remembered per process (a key's hash never changes)


class SignInRequired(Exception):
    """No usable session: the page sends the browser to the sign-in page."""

    def __init__(self, *, ended: bool) -> None:
        super().__init__("sign-in required")
        self.ended = ended  # a session was there but is over (expired, signed out, key revoked)


class AdminRequired(Exception):
    """A team's session on a page for the admin key only."""

    def __init__(self, viewer: Viewer) -> None:
        super().__init__("admin key required")
        self.viewer = viewer


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in caller: the admin (every team) or one team's key (that team only)."""

    sid: str  # the session's id, as its cookie holds it
    csrf_token: str
    principal: Principal | None = None  # a team session's key; None for the admin

    @property
    def admin(self) -> bool:
        return self.principal is None

    def team_scope(self, wanted: str | None) -> str | None:
        """The team a page shows: the one asked for by the admin (None: every team), always the
        session's own for a team key, whatever was asked."""
        return wanted if self.principal is None else self.principal.team_id


def console_secret(explicit: str | None, admin_key: str | None) -> bytes | None:
    """The console's secret: `GATEWAY_CONSOLE_SECRET`, else HMAC(admin key, label); None without either."""
    if explicit:
        return explicit.encode()
    if admin_key:
        return hmac.new(admin_key.encode(), DERIVATION_LABEL, hashlib.sha256).digest()
    return None


@dataclass
class ConsoleSessions:
    """The console's sessions: its secret, their lifetime and their store; one per app."""

    secret: bytes | None  # None: no admin key and no console secret, nobody can sign in
    ttl_s: float
    clock: Callable[[], float] = time.time
    _store: SessionStore | None = field(default=None, repr=False)
    _store_redis: RedisClient | None = field(default=None, repr=False)
    _key_hashes: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def configured(cls, settings: Settings) -> ConsoleSessions:
        return cls(
            console_secret(settings.console_secret, settings.admin_key), settings.console_session_ttl_s
        )

    def store(self, redis: RedisClient | None) -> SessionStore:
        """The store on the app's Redis (made once its services are open), or in this process."""
        if self._store is None or self._store_redis is not redis:
            self._store, self._store_redis = SessionStore.of(redis), redis
        return self._store

    async def open(self, services: Services, principal: Principal | None) -> str:
        """A new session for a team key (`principal`) or the admin (None): its id, for the cookie."""
        sid = secrets.token_urlsafe(SESSION_ID_BYTES)
        expires_at = int(self.clock() + self.ttl_s)
        key_id, team_id = (None, None) if principal is None else (principal.key_id, principal.team_id)
        seal = self._seal(sid, expires_at, key_id, team_id, services.settings.admin_key)
        record = SessionRecord(expires_at=expires_at, seal=seal, key_id=key_id, team_id=team_id)
        await self.store(services.redis).put(sid, record, int(self.ttl_s))
        return sid

    async def close(self, services: Services, sid: str) -> None:
        """End a session in every process that shares the store."""
        await self.store(services.redis).delete(sid)

    async def viewer(self, request: Request, services: Services) -> Viewer:
        sid = request.cookies.get(cookie_name(request))
        if not sid or self.secret is None:
            raise SignInRequired(ended=False)
        if SESSION_ID.fullmatch(sid) is None:  # a cookie of another kind, or made up
            raise SignInRequired(ended=True)
        record = await self.store(services.redis).get(sid)
        if record is None or not self._valid(sid, record, services.settings.admin_key):
            raise SignInRequired(ended=True)
        principal = None if record.admin else await self._principal(services, record)
        return Viewer(sid, self.csrf_token(sid), principal)

    def csrf_token(self, sid: str) -> str:
        """The token every form of a session carries: bound to its id, unguessable without the secret."""
        return self._mac(b"csrf:" + sid.encode())

    def start(self, response: Response[object], request: Request, sid: str) -> None:
        """Set the session cookie on the response that ends a sign-in."""
        _set_session_cookie(response, request, sid, int(self.ttl_s))

    @staticmethod
    def end(response: Response[object], request: Request) -> None:
        """Clear the session cookie; with the attributes it was set with, or a browser keeps a
        `__Host-` one."""
        _set_session_cookie(response, request, "", 0)

    def _valid(self, sid: str, record: SessionRecord, admin_key: str | None) -> bool:
        if self.clock() >= record.expires_at or (record.admin and admin_key is None):
            return False
        expected = self._seal(sid, record.expires_at, record.key_id, record.team_id, admin_key)
        return constant_time_equals(record.seal, expected)

    def _seal(
        self, sid: str, expires_at: int, key_id: str | None, team_id: str | None, admin_key: str | None
    ) -> str:
        who = f"admin:{admin_key}" if key_id is None else f"key:{key_id}:{team_id}"
        return self._mac(f"session:{sid}:{expires_at}:{who}".encode())

    def _mac(self, message: bytes) -> str:
        assert self.secret is not None
        digest = hmac.new(self.secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    async def _principal(self, services: Services, record: SessionRecord) -> Principal:
        """The session's team key, still good: through the key cache, as the API checks a key."""
        assert record.key_id is not None
        try:
            principal = await services.key_cache.verify(await self._key_hash(services, record.key_id))
        except (AuthenticationFailed, NotFound):  # revoked, expired, its team deleted; or gone
            raise SignInRequired(ended=True) from None
        if principal.team_id != record.team_id:
            raise SignInRequired(ended=True)
        return principal

    async def _key_hash(self, services: Services, key_id: str) -> str:
        """The hash the key cache knows a key by: read once per process, as a key's hash never changes."""
        known = self._key_hashes.get(key_id)
        if known is None:
            async with services.sessions() as session:
                known = (await keys.get_key(session, key_id)).key_hash
            if len(self._key_hashes) >= MAX_KEY_IDS:
                self._key_hashes.clear()
            self._key_hashes[key_id] = known
        return known


def served_over_https(request: Request) -> bool:
    """https to the gateway, or to a trusted proxy in front of it (gateway.server.forwarded)."""
    return request.url.scheme == "https"


def cookie_name(request: Request) -> str:
    return SECURE_COOKIE if served_over_https(request) else COOKIE


def _set_session_cookie(response: Response[object], request: Request, sid: str, max_age: int) -> None:
    secure = served_over_https(request)
    response.set_cookie(
        SECURE_COOKIE if secure else COOKIE,
        sid,
        max_age=max_age,
        path=SECURE_COOKIE_PATH if secure else COOKIE_PATH,
        secure=secure,
        httponly=True,
        samesite="strict",
    )


# What a handler declares to receive the console's sessions; as with the services, Litestar is told
# not to check the value against a dataclass msgspec cannot describe.
ConsoleDependency = NamedDependency[SkipValidation[ConsoleSessions]]


async def provide_viewer(
    request: Request, console: ConsoleDependency, services: ServicesDependency
) -> Viewer:
    return await console.viewer(request, services)


async def provide_admin(viewer: NamedDependency[Viewer]) -> Viewer:
    if not viewer.admin:
        raise AdminRequired(viewer)
    return viewer


def session_dependencies(console: ConsoleSessions) -> dict[str, Provide]:
    """The console router's dependencies: its sessions, the viewer of a page, and the admin."""
    return {
        "console": Provide(lambda: console, sync_to_thread=False, use_cache=True),
        "viewer": Provide(provide_viewer),
        "admin": Provide(provide_admin),
    }
