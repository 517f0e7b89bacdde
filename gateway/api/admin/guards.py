"""The admin guard: `Authorization: Bearer <GATEWAY_ADMIN_KEY>`, compared in constant time.

401 for a missing or unknown key, 403 for a live team key (a caller the gateway knows, on a route
that is not its own), 429 once a client has spent its failed attempts (gateway.auth.attempts, shared
with the console's sign-in): every attempt takes one before its key is checked, and a key that
verifies gives it back.
"""

from __future__ import annotations

from enum import Enum

import structlog
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from gateway.api.admin.deps import AdminServices, admin_services
from gateway.auth.attempts import TooManyAttempts
from gateway.auth.bearer import bearer_token
from gateway.auth.secrets import constant_time_equals
from gateway.errors import AuthenticationFailed, PermissionDenied, RateLimited

log = structlog.get_logger("gateway.admin")

NOT_CONFIGURED = "The admin API is disabled: GATEWAY_ADMIN_KEY is not set on this gateway."
ADMIN_KEY_REQUIRED = "Admin key required: this key may not use the admin API."
UNKNOWN_KEY = "Invalid admin key."
THROTTLED = "Too many failed attempts with an invalid key: retry after {seconds} seconds."


class Caller(Enum):
    ADMIN = "admin"
    TEAM_KEY = "team_key"  # a live team key: known, but not the admin


async def admin_guard(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Let the admin key through; raise 401, 403 or 429 for anything else."""
    services = admin_services(connection)
    admin_key = services.settings.admin_key
    if admin_key is None:
        raise PermissionDenied(NOT_CONFIGURED)
    token = bearer_token(connection.headers.get("authorization"))  # 401 without one: no attempt
    address = connection.client.host if connection.client else "unknown"
    try:
        caller = await services.key_attempts.check(
            address, token, lambda: _caller(services, token, admin_key)
        )
    except TooManyAttempts as exc:
        log.warning("admin_key_throttled", client=address)
        raise RateLimited(
            THROTTLED.format(seconds=exc.retry_after_s), headers={"retry-after": str(exc.retry_after_s)}
        ) from None
    if caller is None:
        log.warning("admin_key_refused", client=address)
        raise AuthenticationFailed(UNKNOWN_KEY)
    if caller is Caller.TEAM_KEY:
        raise PermissionDenied(ADMIN_KEY_REQUIRED)


async def _caller(services: AdminServices, token: str, admin_key: str) -> Caller | None:
    """Whom `token` names: the admin, a live team key, or (None) nobody."""
    if constant_time_equals(token, admin_key):
        return Caller.ADMIN
    try:
        await services.key_cache.authenticate(f"Bearer {token}")
    except AuthenticationFailed:
        return None
    return Caller.TEAM_KEY
