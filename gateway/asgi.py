"""The ASGI entry point for servers: `uvicorn --factory gateway.asgi:app_factory`.

The proxied endpoints are served by `ProxyFront` in front of the Litestar app (the hot path); the
header cap applies to both.
"""

from __future__ import annotations

from litestar.types import ASGIApp

from gateway.api.header_cap import header_cap
from gateway.api.proxy_asgi import ProxyFront
from gateway.app import create_app
from gateway.settings import Settings, load_settings


def serving_app(settings: Settings) -> ASGIApp:
    """What `gateway serve` runs: the header cap, the proxy front, then the Litestar app."""
    return header_cap(ProxyFront(create_app(settings), settings.catalog.limits.max_body_bytes))


def app_factory() -> ASGIApp:
    return serving_app(load_settings())
