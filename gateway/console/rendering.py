"""Pages out of templates: the Jinja environment, the context every page has, and the pages shown
for what a handler refuses (sign-in needed, admin only, a forged request, a bad parameter)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import structlog
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar import Request, Response
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.template import TemplateConfig
from litestar.types import ExceptionHandlersMap

from gateway.console import figures
from gateway.console.auth.forgery import CSRF_FIELD, CrossSiteRefused
from gateway.console.auth.session_state import SessionsUnavailable
from gateway.console.auth.sessions import AdminRequired, ConsoleSessions, SignInRequired, Viewer
from gateway.errors import GatewayError

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
LOGIN_PATH = "/ui/login"
# Everything a page loads comes from the gateway itself; no page may be framed by another site.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
# On every console response; the router sets them, and the error pages (made outside it) too.
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}

log = structlog.get_logger("gateway.console")


def console_templates() -> TemplateConfig[JinjaTemplateEngine]:
    """The app's template engine: the console's templates, autoescaped, an undefined name an error."""
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        count=figures.count,
        usd=figures.usd,
        share=figures.share,
        rate=figures.rate,
        millis=figures.millis,
        seconds=figures.seconds,
        moment=moment,
        query=urlencode,
    )
    environment.globals["percent"] = figures.percent
    environment.globals["csrf_field"] = CSRF_FIELD
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))


def moment(value: datetime | int | float | None) -> str:
    """A time as the console shows it: UTC (Z), to the second."""
    if value is None:
        return figures.MISSING
    when = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def page(
    template: str, viewer: Viewer | None, section: str, *, status_code: int = 200, **context: Any
) -> Template:
    return Template(
        template_name=template,
        context={"viewer": viewer, "section": section, "notice": None, "error": None} | context,
        status_code=status_code,
    )


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path of this gateway, never another site."""
    if not target or not target.startswith("/ui/") or target.startswith("/ui/login"):
        return "/ui/usage"
    if "//" in target or "\\" in target or not target.isprintable():
        return "/ui/usage"
    return target


def sign_in_required(request: Request, exc: SignInRequired) -> Response[Any]:
    """To the sign-in page, coming back here afterwards; an ended session's cookie is cleared."""
    params = {
        "next": request.url.path if request.method == "GET" else None,
        "ended": "1" if exc.ended else None,
    }
    query = urlencode({name: value for name, value in params.items() if value})
    response: Response[Any] = Redirect(
        LOGIN_PATH + (f"?{query}" if query else ""), status_code=303, headers={"cache-control": "no-store"}
    )
    if exc.ended:
        ConsoleSessions.end(response, request)
    return response


def refusal(viewer: Viewer | None, status_code: int, title: str, message: str) -> Template:
    """The page for what the console refuses. An exception handler makes it, outside the router,
    so it sets the router's headers itself."""
    return Template(
        template_name="refused.html",
        context={
            "viewer": viewer,
            "section": "",
            "notice": None,
            "error": None,
            "title": title,
            "message": message,
        },
        status_code=status_code,
        headers=SECURITY_HEADERS | {"cache-control": "no-store"},
    )


def admin_required(request: Request, exc: AdminRequired) -> Template:
    message = "This page needs the admin key: a team key sees its own team's usage and batches."
    return refusal(exc.viewer, 403, "Admin only", message)


def cross_site_refused(request: Request, exc: CrossSiteRefused) -> Template:
    log.warning("console_cross_site_refused", path=request.url.path, origin=request.headers.get("origin"))
    message = (
        "This form did not come from a page of this console (or its page is too old): "
        "go back, reload the page and send it again."
    )
    return refusal(None, 403, "Request refused", message)


def form_too_large(request: Request, exc: RequestEntityTooLarge) -> Template:
    log.warning("console_form_too_large", path=request.url.path)
    return refusal(
        None, 413, "Request refused", "This form is larger than any console form: nothing was read."
    )


def sessions_unavailable(request: Request, exc: SessionsUnavailable) -> Template:
    message = "The gateway cannot reach its session store (Redis) just now: reload the page in a moment."
    return refusal(None, 503, "Sessions are unavailable", message)


def gateway_error(request: Request, exc: GatewayError) -> Template:
    return refusal(None, exc.status, "Cannot show this", exc.message)


CONSOLE_ERRORS: ExceptionHandlersMap = {
    SignInRequired: sign_in_required,
    AdminRequired: admin_required,
    CrossSiteRefused: cross_site_refused,
    RequestEntityTooLarge: form_too_large,
    SessionsUnavailable: sessions_unavailable,
    GatewayError: gateway_error,
}
