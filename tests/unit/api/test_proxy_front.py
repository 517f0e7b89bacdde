"""The proxy front holds the services of the app's lifespan, and only while that lifespan runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from litestar.testing import TestClient

from gateway.api.proxy_asgi import ProxyFront
from gateway.app import create_app
from tests.fuzz.stack import fuzz_settings, prepare_database

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def test_each_lifespan_serves_with_its_own_services(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    _, secret = asyncio.run(prepare_database(settings))
    app = create_app(settings)
    front = ProxyFront(app, settings.catalog.limits.max_body_bytes)
    auth = {"Authorization": f"Bearer {secret}"}
    opened = []
    for _ in range(2):
        with TestClient(front) as client:
            services = app.state.services
            opened.append(services)
            assert front._services is services  # taken when the lifespan started them
            response = client.post("/v1/chat/completions", json=CHAT, headers=auth)
            assert response.status_code == 200, response.text
        assert front._services is None  # the lifespan closed them: nothing keeps them here
    assert opened[0] is not opened[1]
