"""The ASGI entry point for servers: `uvicorn --factory gateway.server.asgi:app_factory`.

The app (gateway.app, the proxy front included) behind the header cap, and the forwarded headers
of trusted proxies (gateway.server.forwarded).
"""

from __future__ import annotations

from litestar.types import ASGIApp

from gateway.api.front.header_cap import header_cap
from gateway.app import create_app
from gateway.server.forwarded import trusting_proxies
from gateway.server.gc_tuning import tune_for_serving
from gateway.settings import Settings, load_settings


def serving_app(settings: Settings, *, tune_gc: bool = False) -> ASGIApp:
    """What `gateway serve` runs: trusted proxies' forwarded headers, the header cap, then the app."""
    app = create_app(settings, on_started=tune_for_serving if tune_gc else None)
    return trusting_proxies(header_cap(app), settings.trusted_proxies)


def app_factory() -> ASGIApp:
    """Each worker process's app; its garbage collector is tuned once it has started
    (`gateway.server.gc_tuning`)."""
    return serving_app(load_settings(), tune_gc=True)
