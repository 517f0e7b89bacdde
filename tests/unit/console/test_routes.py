"""The console's bound on a request body: every console handler, and nothing above it, reads at most
a small form, whatever the app's own limit for the API."""

from __future__ import annotations

from litestar.handlers import HTTPRouteHandler

from gateway.app import create_app
from gateway.console.routes import FORM_MAX_BYTES
from gateway.settings import load_settings


def test_every_console_handler_reads_at_most_a_small_form() -> None:
    app = create_app(load_settings({"GATEWAY_ADMIN_KEY": "admin"}))
    console = [
        handler
        for route in app.routes
        if route.path.startswith("/ui")
        for handler in getattr(route, "route_handlers", ())
        if isinstance(handler, HTTPRouteHandler)
    ]
    assert any("POST" in handler.http_methods for handler in console)
    assert {handler.resolve_request_max_body_size() for handler in console} == {FORM_MAX_BYTES}
    assert app.request_max_body_size > FORM_MAX_BYTES  # type: ignore[operator]
