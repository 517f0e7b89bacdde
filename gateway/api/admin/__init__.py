"""The admin API (`/admin/*`): teams, keys, providers and usage, each behind the admin guard."""

from __future__ import annotations

from litestar import Controller
from litestar.handlers import HTTPRouteHandler

from gateway.api.admin.keys import KeyController
from gateway.api.admin.providers import PROVIDER_HANDLERS
from gateway.api.admin.teams import TeamController
from gateway.api.admin.usage import USAGE_HANDLERS

ADMIN_CONTROLLERS: list[type[Controller]] = [TeamController, KeyController]
ADMIN_HANDLERS: list[HTTPRouteHandler | type[Controller]] = [
    *USAGE_HANDLERS,
    *PROVIDER_HANDLERS,
    *ADMIN_CONTROLLERS,
]

__all__ = ["ADMIN_CONTROLLERS", "ADMIN_HANDLERS", "KeyController", "TeamController"]
