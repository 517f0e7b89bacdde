"""The ASGI entry point for servers: `uvicorn --factory gateway.asgi:app_factory`."""

from __future__ import annotations

from litestar import Litestar

from gateway.app import create_app
from gateway.settings import load_settings


def app_factory() -> Litestar:
    return create_app(load_settings())
