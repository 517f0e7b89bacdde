"""The start-up check of Redis persistence, against real Redis servers."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis
from structlog.testing import LogCapture

from gateway import services
from gateway.app import create_app
from gateway.db.migrate import upgrade_head_async
from gateway.services import warn_if_redis_forgets
from gateway.settings import load_settings
from tests.faults.stores import PrivateRedis
from tests.support.gateway import REPO
from tests.support.stores import REDIS_DBS, redis_url

pytestmark = pytest.mark.integration

REDIS_URL = redis_url("services")


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What `gateway.services` logs, at every level, whatever configured structlog before."""
    capture = LogCapture()
    every_level = structlog.make_filtering_bound_logger(logging.DEBUG)
    monkeypatch.setattr(services, "log", structlog.wrap_logger(None, [capture], wrapper_class=every_level))
    return capture.entries


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.flushdb()  # what a started gateway left in this area's db
    await client.aclose()


async def test_a_redis_keeping_nothing_on_disk_is_warned_of(redis: Redis, logs: list[dict[str, Any]]) -> None:
    save = (await redis.config_get("save"))["save"]
    appendonly = (await redis.config_get("appendonly"))["appendonly"]
    if save or appendonly == "yes":
        pytest.skip(f"the test Redis persists (save {save!r}, appendonly {appendonly})")
    await warn_if_redis_forgets(redis)
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == "redis_not_persistent"
    assert "metering buffer" in warning["detail"] and "spend counters" in warning["detail"]


async def test_a_redis_refusing_config_is_not_warned_of(redis: Redis, logs: list[dict[str, Any]]) -> None:
    """As a managed Redis that does not let clients run CONFIG."""
    user = f"gateway-test-{uuid.uuid4().hex[:8]}"
    await redis.execute_command("ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", "-config")
    restricted = Redis.from_url(f"redis://{user}@{REDIS_URL.removeprefix('redis://')}")
    try:
        await warn_if_redis_forgets(restricted)
    finally:
        await restricted.aclose()
        await redis.execute_command("ACL", "DELUSER", user)
    assert [(entry["event"], entry["log_level"]) for entry in logs] == [
        ("redis_persistence_unknown", "debug")
    ]


async def test_a_redis_with_an_append_only_file_is_not_warned_of(logs: list[dict[str, Any]]) -> None:
    server = PrivateRedis(appendonly=True).start()
    client = Redis.from_url(server.url(REDIS_DBS["services"]))
    try:
        await warn_if_redis_forgets(client)
    finally:
        await client.aclose()
        server.stop()
    assert logs == []


async def test_the_gateway_warns_once_as_it_starts(
    redis: Redis, logs: list[dict[str, Any]], tmp_path: Path
) -> None:
    if (await redis.config_get("save"))["save"] or (await redis.config_get("appendonly"))[
        "appendonly"
    ] == "yes":
        pytest.skip("the test Redis persists")
    database_url = f"sqlite:///{tmp_path}/gateway.db"
    await upgrade_head_async(database_url)
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": REDIS_URL,
            "PATH": os.environ.get("PATH", ""),
        }
    )
    async with AsyncTestClient(app=create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        async with asyncio.timeout(5):
            while not any(entry["event"] == "redis_not_persistent" for entry in logs):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
    assert [entry["event"] for entry in logs].count("redis_not_persistent") == 1
