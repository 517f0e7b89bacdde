"""Who is looking at a console page: the session cookie, checked on every request.

A page's `viewer` dependency verifies the cookie's token (`gateway.console.auth.tokens`), refuses a
session that signed out, and re-checks its key through the key cache (a cheap in-memory hit most
of the time), so a session ends as soon as its key is revoked, expires or its team is deleted, and
an admin session ends when the admin key changes. Admin pages depend on `admin` instead, which
refuses a team's session.

The cookie is `__Host-gateway_console` when the console is served over https: a browser takes a
cookie of that name only if it is Secure, for Path=/ and without a Domain, so no other host (a
subdomain) and no plain-http page can set or shadow it. Over plain http (a gateway on localhost)
such a cookie would be refused, so it is `gateway_console`, for Path=/ui. Which scheme a request
came over is the server's to say (https to the gateway, or to a trusted proxy that says so:
gateway.server.forwarded), never a header any client can send.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from litestar import Request, Response
from litestar.di import NamedDependency, Provide

from gateway.auth.principal import Principal
from gateway.auth.secrets import constant_time_equals
from gateway.console.auth.session_state import SignOuts
from gateway.console.auth.tokens import SessionClaims, TokenSigner, console_secret
from gateway.errors import AuthenticationFailed
from gateway.services import services_of
from gateway.settings import Settings

COOKIE = "gateway_console"  # over plain http
COOKIE_PATH = "/ui"
SECURE_COOKIE = "__Host-gateway_console"  # over https; the prefix requires Path=/
SECURE_COOKIE_PATH = "/"


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

    claims: SessionClaims
    csrf_token: str
    principal: Principal | None = None  # a team session's key; None for the admin

    @property
    def admin(self) -> bool:
        return self.principal is None

    def team_scope(self, wanted: str | None) -> str | None:
        """The team a page shows: the one asked for by the admin (None: every team), always the
        session's own for a team key, whatever was asked."""
        return wanted if self.principal is None else self.principal.team_id


@dataclass
class ConsoleSessions:
    """The console's signer and what it remembers; one per app."""

    signer: TokenSigner | None  # None: no admin key and no console secret, nobody can sign in
    ttl_s: float
    sign_outs: SignOuts = field(default_factory=SignOuts)
    clock: Callable[[], float] = time.time

    @classmethod
    def configured(cls, settings: Settings) -> ConsoleSessions:
        secret = console_secret(settings.console_secret, settings.admin_key)
        return cls(None if secret is None else TokenSigner(secret), settings.console_session_ttl_s)

    async def viewer(self, request: Request) -> Viewer:
        token = request.cookies.get(cookie_name(request))
        if not token or self.signer is None:
            raise SignInRequired(ended=False)
        claims = self.signer.verify(token, now=self.clock())
        if claims is None or await self.sign_outs.contains(services_of(request).redis, claims.sid):
            raise SignInRequired(ended=True)
        principal = await _principal(request, self.signer, claims)
        return Viewer(claims, self.signer.csrf_token(claims), principal)

    def start(self, response: Response[object], request: Request, token: str) -> None:
        """Set the session cookie on the response that ends a sign-in."""
        _set_session_cookie(response, request, token, int(self.ttl_s))

    @staticmethod
    def end(response: Response[object], request: Request) -> None:
        """Clear the session cookie; with the attributes it was set with, or a browser keeps a
        `__Host-` one."""
        _set_session_cookie(response, request, "", 0)


async def _principal(request: Request, signer: TokenSigner, claims: SessionClaims) -> Principal | None:
    """The session's team key, still good (None for the admin, still with the same admin key)."""
    services = services_of(request)
    if claims.key_hash is None:
        admin_key = services.settings.admin_key
        if admin_key is None or not constant_time_equals(
            claims.admin_mark or "", signer.admin_mark(admin_key)
        ):
            raise SignInRequired(ended=True)
        return None
    try:
        return await services.key_cache.verify(claims.key_hash)
    except AuthenticationFailed:  # revoked, expired, its team deleted
        raise SignInRequired(ended=True) from None


def served_over_https(request: Request) -> bool:
    """https to the gateway, or to a trusted proxy in front of it (gateway.server.forwarded)."""
    return request.url.scheme == "https"


def cookie_name(request: Request) -> str:
    return SECURE_COOKIE if served_over_https(request) else COOKIE


def _set_session_cookie(response: Response[object], request: Request, token: str, max_age: int) -> None:
    secure = served_over_https(request)
    response.set_cookie(
        SECURE_COOKIE if secure else COOKIE,
        token,
        max_age=max_age,
        path=SECURE_COOKIE_PATH if secure else COOKIE_PATH,
        secure=secure,
        httponly=True,
        samesite="strict",
    )


async def provide_viewer(request: Request, console: NamedDependency[ConsoleSessions]) -> Viewer:
    return await console.viewer(request)


async def provide_admin(viewer: NamedDependency[Viewer]) -> Viewer:
    if not viewer.admin:
        raise AdminRequired(viewer)
    return viewer


def session_dependencies(console: ConsoleSessions) -> dict[str, Provide]:
    return {
        "console": Provide(lambda: console, sync_to_thread=False, use_cache=True),
        "viewer": Provide(provide_viewer),
        "admin": Provide(provide_admin),
    }
