"""Refusing forged cross-site requests: every console POST must come from a console page.

Two checks, either of which stops a forged form: the browser's `Origin` (or, without it, `Referer`)
must name the host the request was sent to (its `Host`: a trusted proxy's `X-Forwarded-Host` is
already there, gateway.server.forwarded; nobody else's is), and the form must carry the CSRF token bound to the
session (`gateway.console.auth.sessions`), which another site cannot read. The session cookie is also
SameSite=Strict, but that does not separate two ports of one host: those are one site.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from litestar import Request

from gateway.auth.secrets import constant_time_equals
from gateway.console.auth.sessions import Viewer

CSRF_FIELD = "csrf_token"


class CrossSiteRefused(Exception):
    """A POST that did not come from a console page of this gateway."""


def check_origin(request: Request) -> None:
    """The request's Origin (or Referer) is this host; a client that sends neither is no browser
    (browsers send Origin with every POST), and still needs the session's CSRF token."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if claimed is None:
        return
    if claimed == "null":  # an opaque origin: a sandboxed frame, a data: page
        raise CrossSiteRefused
    netloc = urlsplit(claimed).netloc.lower()
    if not netloc or netloc != request.headers.get("host", "").strip().lower():
        raise CrossSiteRefused


def check_form(request: Request, viewer: Viewer, form: dict[str, str]) -> None:
    """A signed-in POST: its origin, and the session's CSRF token among its fields."""
    check_origin(request)
    if not constant_time_equals(form.get(CSRF_FIELD, ""), viewer.csrf_token):
        raise CrossSiteRefused
