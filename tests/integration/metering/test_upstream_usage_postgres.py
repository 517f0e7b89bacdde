"""Absurd and negative counts from a misbehaving upstream, through the whole gateway (in process) to
PostgreSQL: every request recorded, none with a negative cost, and `/readyz` and `/metrics` saying
how long the oldest unwritten event has waited.

The gateway runs with `GATEWAY_METERING_WRITER=external`, so its events wait in the Redis stream
until the test writes them as an external `gateway metering-writer` would.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from sqlalchemy import select

from gateway.db.models import UsageRecord
from gateway.db.session import session_factory
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.metering.storage.writer import UsageWriter
from gateway.server.asgi import serving_app
from gateway.settings import load_settings
from tests.integration.metering.conftest import drop_database, fresh_pg_engine, pg_url
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.stores import redis_url
from tests.unit.auth.records import add_key, add_team

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_metering_upstream"
REDIS_URL = redis_url("metering-app")
CONFIG = """
providers:
  - {{name: scripted, kind: openai, region: us-east, base_url: "{base_url}/v1", timeout_s: 5}}
models:
  - name: chat
    deployments:
      - {{provider: scripted, model: scripted-model, price: {{input: 3, output: 15}}}}
"""
USAGES: dict[str, dict[str, Any] | None] = {
    "absurd": {"prompt_tokens": 3_000_000_000, "completion_tokens": 5, "total_tokens": 3_000_000_005},
    "negative": {"prompt_tokens": -1_000_000, "completion_tokens": -7, "total_tokens": -1_000_007},
    "cached past the prompt": {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 9},
    },
    "plain": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
}


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as scripted:
        yield scripted


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


def scrape(text: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


async def test_untrue_counts_are_recorded_as_estimates_and_the_wait_is_reported(
    upstream: ScriptedUpstream, redis: Redis, tmp_path: Path
) -> None:
    engine = await fresh_pg_engine(DATABASE)
    sessions = session_factory(engine)
    team = await add_team(sessions, "metered")
    _, secret = await add_key(sessions, team.id)
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(base_url=upstream.base_url))
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(config),
            "GATEWAY_DATABASE_URL": pg_url(DATABASE),
            "GATEWAY_REDIS_URL": REDIS_URL,
            "GATEWAY_METERING_WRITER": "external",
            "GATEWAY_ADMIN_KEY": "admin-metering-secret",
            "PATH": os.environ.get("PATH", ""),
        }
    )
    auth = {"authorization": f"Bearer {secret}"}
    try:
        async with AsyncTestClient(app=serving_app(settings)) as client:
            ids = {}
            for name, usage in USAGES.items():
                body = {
                    "model": "chat",
                    "messages": [{"role": "user", "content": "hi"}],
                    "scripted_usage": usage,
                }
                reply = await client.post("/v1/chat/completions", json=body, headers=auth)
                assert reply.status_code == 200, (name, reply.text)
                ids[name] = reply.headers["x-request-id"]
            await asyncio.sleep(0.3)

            ready = await client.get("/readyz")
            assert ready.status_code == 200  # metering trails, the gateway still serves
            report = ready.json()
            assert report["metering_backlog"] == len(USAGES)
            assert report["metering_oldest_unwritten_s"] >= 0.3
            assert report["metering_dead_letters"] == 0
            gauges = scrape((await client.get("/metrics")).text)
            assert gauges["gateway_metering_oldest_unwritten_seconds"] >= 0.3
            assert gauges["gateway_usage_dead_letters"] == 0

            writer = UsageWriter(RedisStreamBuffer(redis, consumer="external-writer"), sessions)
            async with asyncio.timeout(20):  # stuck on a record, it would retry forever
                await writer.flush()

            report = (await client.get("/readyz")).json()
            assert (report["metering_backlog"], report["metering_oldest_unwritten_s"]) == (0, None)
            gauges = scrape((await client.get("/metrics")).text)
            assert gauges["gateway_metering_oldest_unwritten_seconds"] == 0

        async with sessions() as session:
            records = {r.request_id: r for r in (await session.scalars(select(UsageRecord))).all()}
    finally:
        await engine.dispose()
        await drop_database(DATABASE)

    assert set(records) == set(ids.values())
    for name in ("absurd", "negative", "cached past the prompt"):
        record = records[ids[name]]
        assert record.usage_source == "estimated", name
        assert 0 <= record.prompt_tokens < 1000 and 0 <= record.completion_tokens < 1000, name
        assert 0 < record.cost < 1, name
    plain = records[ids["plain"]]
    assert (plain.usage_source, plain.prompt_tokens, plain.completion_tokens) == ("upstream", 10, 8)
