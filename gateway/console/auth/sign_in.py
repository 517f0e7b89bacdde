"""Signing in and out of the console: `/ui/login` and `/ui/logout`.

A sign-in takes the admin key or a team key and answers the same for every key it refuses (unknown,
revoked, expired, malformed), so the page tells nobody whether a key exists. Each sign-in takes one
of its client's failed attempts before its key is checked and gives it back if the key is good
(gateway.auth.attempts, shared with the admin API); with none left, 429 and the key is not checked.
Failures are logged with the address, never with anything of the key.
"""

from __future__ import annotations

import math
from typing import Any

import structlog
from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Redirect, Template

from gateway.auth.attempts import TooManyAttempts
from gateway.auth.secrets import constant_time_equals
from gateway.console.auth.forgery import check_form, check_origin
from gateway.console.auth.session_state import SessionsUnavailable
from gateway.console.auth.sessions import ConsoleDependency, ConsoleSessions, SignInRequired, Viewer
from gateway.console.forms import form_fields
from gateway.console.rendering import LOGIN_PATH, page, safe_next
from gateway.errors import AuthenticationFailed
from gateway.services import Services, ServicesDependency

log = structlog.get_logger("gateway.console")

REFUSED = "That key was not accepted."
DISABLED = "The console is off: set GATEWAY_ADMIN_KEY (or GATEWAY_CONSOLE_SECRET) on the gateway."
UNAVAILABLE = "Sessions are unavailable: the gateway cannot reach Redis. Try again in a moment."


def _login_page(
    next_path: str, *, error: str | None = None, notice: str | None = None, status: int = 200
) -> Template:
    return page("login.html", None, "login", status_code=status, next=next_path, error=error, notice=notice)


@get("/login")
async def login_form(
    request: Request,
    console: ConsoleDependency,
    services: ServicesDependency,
    next: FromQuery[str | None] = None,
    ended: FromQuery[str | None] = None,
    signed_out: FromQuery[str | None] = None,
) -> Response[Any]:
    if console.secret is None:
        return _login_page(safe_next(next), error=DISABLED, status=503)
    try:
        await console.viewer(request, services)
    except SignInRequired:
        notice = "You have signed out." if signed_out else None
        if ended:
            notice = "Your session has ended: sign in again."
        return _login_page(safe_next(next), notice=notice)
    except SessionsUnavailable:
        return _login_page(safe_next(next), error=UNAVAILABLE, status=503)
    return Redirect(safe_next(next), status_code=303)  # signed in already


@post("/login", status_code=303)
async def sign_in(
    request: Request, console: ConsoleDependency, services: ServicesDependency
) -> Response[Any]:
    check_origin(request)
    form = await form_fields(request)
    target = safe_next(form.get("next"))
    address = request.client.host if request.client else "unknown"
    if console.secret is None:
        return _login_page(target, error=DISABLED, status=503)
    key = form.get("key", "")
    try:
        sid = await services.key_attempts.check(address, key, lambda: _open_session(services, console, key))
    except TooManyAttempts as exc:
        log.warning("console_sign_in_throttled", client=address)
        return _throttled(target, exc.retry_after_s)
    except SessionsUnavailable:  # the key was good: its attempt was given back
        return _login_page(target, error=UNAVAILABLE, status=503)
    if sid is None:
        log.warning("console_sign_in_failed", client=address)
        return _login_page(target, error=REFUSED, status=401)
    response: Response[Any] = Redirect(target, status_code=303)
    console.start(response, request, sid)
    return response


def _throttled(target: str, retry_after_s: int) -> Template:
    """The sign-in page that checked no key: this client's failed attempts are spent for now."""
    minutes = math.ceil(retry_after_s / 60)
    error = f"Too many failed sign-ins: try again in {minutes} minute{'' if minutes == 1 else 's'}."
    refused = _login_page(target, error=error, status=429)
    refused.headers["retry-after"] = str(retry_after_s)
    return refused


async def _open_session(services: Services, console: ConsoleSessions, key: str) -> str | None:
    """A new session's id for the admin key or a live team key; None for anything else."""
    admin_key = services.settings.admin_key
    if admin_key is not None and constant_time_equals(key, admin_key):
        sid = await console.open(services, None)
        log.info("console_signed_in", role="admin")
        return sid
    try:
        principal = await services.key_cache.authenticate(f"Bearer {key}")
    except AuthenticationFailed:
        return None
    sid = await console.open(services, principal)
    log.info("console_signed_in", role="team", team=principal.team_id, key_prefix=principal.key_prefix)
    return sid


@post("/logout", status_code=303)
async def sign_out(
    request: Request,
    console: ConsoleDependency,
    viewer: NamedDependency[Viewer],
    services: ServicesDependency,
) -> Response[Any]:
    """End the session in the store (Redis: every process): its cookie names nobody from now on."""
    check_form(request, viewer, await form_fields(request))
    await console.close(services, viewer.sid)
    response: Response[Any] = Redirect(f"{LOGIN_PATH}?signed_out=1", status_code=303)
    console.end(response, request)
    return response


SIGN_IN_HANDLERS = [login_form, sign_in, sign_out]
