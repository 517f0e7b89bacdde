"""The web console at `/ui`: server-rendered pages for usage, batches and jobs, providers, and teams
and keys, signed in with the admin key or a team key (docs/console.md)."""

from __future__ import annotations

from gateway.console.rendering import console_templates
from gateway.console.routes import console_router

__all__ = ["console_router", "console_templates"]
