"""`gateway serve` with a Cluster URL: batches pinned, admission, the usage stream and its writer
all work across three masters (a script or transaction spanning slots would fail with CROSSSLOT,
and the gateway would fall back to its degraded modes, which the checks below would show)."""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.redis_topologies.gateway_stack import ADMIN_KEY, CONFIG, drained, drop_database
from tests.integration.redis_topologies.servers import LocalCluster
from tests.support.gateway import GatewayProcess, create_team, recreate_database
from tests.support.upstream import RunningUpstream


@pytest.fixture
def gateway_on_cluster(
    tmp_path: Path, cluster: LocalCluster, upstreams: tuple[RunningUpstream, RunningUpstream]
) -> Iterator[tuple[GatewayProcess, str]]:
    cluster.flush()
    database = f"gateway_test_redis_topologies_cluster_{os.getpid()}"
    database_url = recreate_database(database)
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(east=upstreams[0].base_url, west=upstreams[1].base_url))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": cluster.url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway: GatewayProcess | None = None
    try:
        gateway = GatewayProcess(config, env).start()
        yield gateway, database_url
    finally:
        if gateway is not None:
            gateway.stop()
        asyncio.run(drop_database(database))


def test_batches_limits_and_metering_run_on_a_cluster(
    gateway_on_cluster: tuple[GatewayProcess, str], cluster: LocalCluster
) -> None:
    gateway, database_url = gateway_on_cluster
    with httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        team = create_team(admin, "on-cluster", rpm_limit=10_000, monthly_budget_usd="100")

    async def drive() -> tuple[dict[str, set[str]], list[str]]:
        client = openai.AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key=team.key, max_retries=0)
        providers: dict[str, set[str]] = defaultdict(set)
        ids: list[str] = []

        async def one(batch: str) -> None:
            raw = await client.chat.completions.with_raw_response.create(
                model="chat",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Gateway-Batch": batch},
            )
            providers[batch].add(raw.headers["x-gateway-provider"])
            ids.append(raw.headers["x-request-id"])

        try:
            await asyncio.gather(*(one(f"cluster-{i % 12}") for i in range(120)))
        finally:
            await client.close()
        return providers, ids

    providers, ids = asyncio.run(drive())
    records = asyncio.run(drained(database_url, team.id, set(ids)))

    assert all(len(used) == 1 for used in providers.values()), providers
    assert {r["request_id"] for r in records if r["status"] == 200} == set(ids)
    readiness = httpx.get(gateway.base_url + "/readyz").json()
    assert readiness["redis"] == "ok" and readiness["degraded"] == [], readiness
    keys = [key for node in cluster.keys_per_node() for key in node]
    assert any(key.startswith(b"gw:pin:{") for key in keys) and any(b"}:spend:team:" in key for key in keys)
    assert "pin_store_failed" not in gateway.logs() and "rate_limits_degraded" not in gateway.logs()
