"""The admin guard: `Authorization: Bearer <GATEWAY_ADMIN_KEY>`, compared in constant time."""

from __future__ import annotations

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from gateway.api.admin.deps import services_of
from gateway.auth.bearer import bearer_token
from gateway.auth.secrets import constant_time_equals
from gateway.errors import PermissionDenied

NOT_CONFIGURED = "The admin API is disabled: GATEWAY_ADMIN_KEY is not set on this gateway."
ADMIN_KEY_REQUIRED = "Admin key required: this key may not use the admin API."


def require_admin(connection: ASGIConnection, admin_key: str | None) -> None:
    """401 without a readable Bearer header; 403 for any key but the admin key (team keys included)."""
    if admin_key is None:
        raise PermissionDenied(NOT_CONFIGURED)
    token = bearer_token(connection.headers.get("authorization"))
    if not constant_time_equals(token, admin_key):
        raise PermissionDenied(ADMIN_KEY_REQUIRED)


def admin_guard(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """The Litestar guard form of `require_admin`, for controllers."""
    require_admin(connection, services_of(connection).settings.admin_key)
