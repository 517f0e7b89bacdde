"""The console's router: every page under `/ui`, its static files, and what all of them share (the
session dependencies, the error pages, security headers, no caching of pages, Server-Timing, the
bound on a form's size)."""

from __future__ import annotations

from typing import Any

from litestar import Router, get
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.response import Redirect
from litestar.static_files import create_static_files_router

from gateway.console.auth.sessions import ConsoleSessions, session_dependencies
from gateway.console.auth.sign_in import SIGN_IN_HANDLERS
from gateway.console.pages.batches import BATCH_PAGE_HANDLERS
from gateway.console.pages.providers import PROVIDER_PAGE_HANDLERS
from gateway.console.pages.quotes import QUOTE_PAGE_HANDLERS
from gateway.console.pages.reconciliation import RECONCILIATION_PAGE_HANDLERS
from gateway.console.pages.teams import TEAM_PAGE_HANDLERS
from gateway.console.pages.usage import USAGE_PAGE_HANDLERS
from gateway.console.rendering import CONSOLE_ERRORS, SECURITY_HEADERS, STATIC
from gateway.console.timing import server_timing
from gateway.settings import Settings

STATIC_MAX_AGE_S = 3600
# Every console form (sign-in, a team, a key, sign-out) is a few hundred bytes of text; the sign-in
# form is read before anyone is authenticated, so a body past this bound is refused with 413 before
# more of it is read (the Content-Length alone, when it is sent), never parsed.
FORM_MAX_BYTES = 16 * 1024


@get(["/", ""])
async def console_home() -> Redirect:
    return Redirect("/ui/usage", status_code=303)


def console_router(settings: Settings) -> Router:
    """`/ui`, for the app's route handlers."""
    static: Any = create_static_files_router(
        path="/static",
        directories=[STATIC],
        cache_control=CacheControlHeader(max_age=STATIC_MAX_AGE_S),
        include_in_schema=False,
    )
    return Router(
        path="/ui",
        route_handlers=[
            console_home,
            *SIGN_IN_HANDLERS,
            *USAGE_PAGE_HANDLERS,
            *BATCH_PAGE_HANDLERS,
            *QUOTE_PAGE_HANDLERS,
            *PROVIDER_PAGE_HANDLERS,
            *RECONCILIATION_PAGE_HANDLERS,
            *TEAM_PAGE_HANDLERS,
            static,
        ],
        dependencies=session_dependencies(ConsoleSessions.configured(settings)),
        exception_handlers=CONSOLE_ERRORS,
        response_headers=[ResponseHeader(name=name, value=value) for name, value in SECURITY_HEADERS.items()],
        cache_control=CacheControlHeader(no_store=True),
        middleware=[server_timing],
        request_max_body_size=FORM_MAX_BYTES,
        include_in_schema=False,
    )
