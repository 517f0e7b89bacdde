"""The ASGI entry point for servers: `uvicorn --factory gateway.server.asgi:app_factory`.

The proxied endpoints are served by `ProxyFront` in front of the Litestar app; the header cap
applies to both.
"""

from __future__ import annotations

from litestar.types import ASGIApp

from gateway.api.header_cap import header_cap
from gateway.api.proxy_asgi import ProxyFront
from gateway.app import create_app
from gateway.server.gc_tuning import tune_for_serving
from gateway.settings import Settings, load_settings


def serving_app(settings: Settings, *, tune_gc: bool = False) -> ASGIApp:
    """What `gateway serve` runs: the header cap, the proxy front, then the Litestar app."""
    app = create_app(settings, on_started=tune_for_serving if tune_gc else None)
    limits = settings.catalog.limits
    return header_cap(ProxyFront(app, limits.max_body_bytes, limits.buffered_body_bytes))


def app_factory() -> ASGIApp:
    """Each worker process's app; its garbage collector is tuned once it has started
    (`gateway.server.gc_tuning`)."""
    return serving_app(load_settings(), tune_gc=True)
