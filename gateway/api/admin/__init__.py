"""The admin API for teams and keys; the app mounts `ADMIN_CONTROLLERS` behind the admin guard."""

from __future__ import annotations

from litestar import Controller

from gateway.api.admin.keys import KeyController
from gateway.api.admin.teams import TeamController

ADMIN_CONTROLLERS: list[type[Controller]] = [TeamController, KeyController]

__all__ = ["ADMIN_CONTROLLERS", "KeyController", "TeamController"]
