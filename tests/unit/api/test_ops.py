"""/readyz says ready while the gateway serves, degraded or not, and 503 only when it can serve no
one: each answer checked against what a request gets at the same moment.

In process: the default config's built-in mock providers, a migrated SQLite file (taken away to
make the database unreachable), no Redis; and a database that was never reachable.
"""

from __future__ import annotations

from pathlib import Path

from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.server.asgi import serving_app
from gateway.services import Services
from gateway.settings import load_settings
from tests.fuzz.stack import DEFAULT_CONFIG, fuzz_settings, prepare_database
from tests.support.gateway import free_port

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "are you there?"}]}


async def test_without_its_database_it_stays_ready_for_the_keys_it_holds(tmp_path: Path) -> None:
    home = tmp_path / "store"
    settings = fuzz_settings(home)
    _, secret = await prepare_database(settings)
    auth = {"Authorization": f"Bearer {secret}"}
    app = create_app(settings)
    async with AsyncTestClient(app=app) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=auth)).status_code == 200
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()["status"], ready.json()["degraded"]) == (200, "ready", [])

        services: Services = app.state.services
        home.rename(tmp_path / "gone")  # the database file goes, and the pooled connections with it
        await services.engine.dispose()

        ready = await client.get("/readyz")
        report = ready.json()
        assert ready.status_code == 200
        assert report["status"] == "ready"
        assert report["database"].startswith("unreachable")
        assert "database" in report["degraded"]
        served = await client.post("/v1/chat/completions", json=CHAT, headers=auth)
        assert served.status_code == 200  # the cached key: ready told the truth
        (tmp_path / "gone").rename(home)  # back, so that the stop drains its usage event at once


async def test_a_database_never_reached_leaves_no_one_to_authenticate(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(DEFAULT_CONFIG),
            "GATEWAY_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/gateway",
            "GATEWAY_LOG_FORMAT": "json",
        }
    )
    async with AsyncTestClient(app=serving_app(settings)) as client:
        ready = await client.get("/readyz")
        report = ready.json()
        assert ready.status_code == 503
        assert report["status"] == "unavailable"
        assert "database" in report["degraded"]
        assert "authenticate" in report["reason"]
        refused = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sk-gw-" + "a" * 40}
        )
        assert refused.status_code == 503  # no key can be verified: unready told the truth


async def test_health_answers_as_healthz_does_for_the_benchmark_clients_that_probe_it(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path / "store")
    async with AsyncTestClient(app=create_app(settings)) as client:
        for method in ("GET", "HEAD"):
            healthz = await client.request(method, "/healthz")
            health = await client.request(method, "/health")
            assert (health.status_code, health.content) == (healthz.status_code, healthz.content), method
            assert health.status_code == 200
        assert (await client.get("/health")).json() == {"status": "ok"}
