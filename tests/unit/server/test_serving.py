"""What `gateway serve` hands uvicorn: its fixed options, and the connection settings."""

from __future__ import annotations

import uvicorn

from gateway.server.serving import APP, OPTIONS, uvicorn_options
from gateway.settings import load_settings


def test_the_connection_settings_reach_uvicorn() -> None:
    settings = load_settings({"GATEWAY_KEEP_ALIVE_TIMEOUT_S": "2", "GATEWAY_LIMIT_CONCURRENCY": "300"})
    config = uvicorn.Config(APP, **uvicorn_options(settings))
    assert (config.timeout_keep_alive, config.limit_concurrency) == (2, 300)
    assert config.http == OPTIONS["http"] == "httptools"


def test_by_default_uvicorn_keeps_its_own_defaults() -> None:
    config = uvicorn.Config(APP, **uvicorn_options(load_settings({})))
    default = uvicorn.Config(APP)
    assert (config.timeout_keep_alive, config.limit_concurrency) == (
        default.timeout_keep_alive,
        default.limit_concurrency,
    )
