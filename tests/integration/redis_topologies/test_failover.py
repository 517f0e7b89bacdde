"""A Sentinel master failover under load: no batch split, no usage record lost or doubled.

A real `gateway serve` (with its metering writer process) reaches Redis through a Sentinel set of
one master and two replicas (`min_replicas=1`) and PostgreSQL; two mock upstreams serve the one
model from two regions. Batches of requests run concurrently through the official `openai` SDK;
once each batch has been served a few times the master is killed outright (SIGKILL), and the
batches go on until the Sentinels have promoted a replica and a few more requests each got through.
A request that fails meanwhile is retried by the client, as a client would.

Then: every batch's replies came from one deployment, and so do its records; and every request
answered 200 has exactly one usage record once the writer has drained, and no other 200 record
exists.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.redis_topologies.gateway_stack import ADMIN_KEY, CONFIG, drained, drop_database
from tests.integration.redis_topologies.servers import LocalSentinelSet
from tests.support.gateway import GatewayProcess, create_team, recreate_database
from tests.support.upstream import RunningUpstream

BATCHES = 8
BEFORE_FAILOVER = 4  # requests per batch served before the master is killed
AFTER_FAILOVER = 4  # requests per batch served once a replica was promoted
CLIENT_ATTEMPTS = 40


@dataclass
class Served:
    """What the clients saw: per batch, the provider of each 200; the request ids of all 200s."""

    providers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    request_ids: list[str] = field(default_factory=list)
    failed_attempts: int = 0


@dataclass
class FailoverStack:
    sentinels: LocalSentinelSet
    gateway: GatewayProcess
    database_url: str
    team_id: str
    key: str


@pytest.fixture
def failover_stack(
    tmp_path: Path, upstreams: tuple[RunningUpstream, RunningUpstream]
) -> Iterator[FailoverStack]:
    database = f"gateway_test_redis_topologies_{os.getpid()}"
    database_url = recreate_database(database)
    sentinels = LocalSentinelSet(replicas=2)
    gateway: GatewayProcess | None = None
    try:
        sentinels.start()
        config = tmp_path / "gateway.yaml"
        config.write_text(CONFIG.format(east=upstreams[0].base_url, west=upstreams[1].base_url))
        env = {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": sentinels.url(min_replicas=1, replica_timeout_ms=500),
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_METERING_RECLAIM_IDLE_S": "2",  # entries whose ack the failover lost come back soon
        }
        gateway = GatewayProcess(config, env).start()
        with httpx.Client(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            team = create_team(admin, "failover")
        yield FailoverStack(sentinels, gateway, database_url, team.id, team.key)
    finally:
        if gateway is not None:
            gateway.stop()
        sentinels.destroy()
        asyncio.run(drop_database(database))


async def _one_request(client: openai.AsyncOpenAI, batch: str, served: Served) -> None:
    """One chat request of `batch`, retried by the client until it gets a 200."""
    for _ in range(CLIENT_ATTEMPTS):
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model="chat",
                messages=[{"role": "user", "content": f"summarise part of {batch}"}],
                extra_headers={"X-Gateway-Batch": batch},
            )
        except (openai.APIStatusError, openai.APIConnectionError):
            served.failed_attempts += 1
            await asyncio.sleep(0.2)
            continue
        served.providers[batch].append(raw.headers["x-gateway-provider"])
        served.request_ids.append(raw.headers["x-request-id"])
        return
    raise AssertionError(f"a request of {batch} never got a 200 in {CLIENT_ATTEMPTS} attempts")


async def _drive(stack: FailoverStack) -> Served:
    served = Served()
    client = openai.AsyncOpenAI(base_url=stack.gateway.base_url + "/v1", api_key=stack.key, max_retries=0)
    batches = [f"failover-{i}" for i in range(BATCHES)]
    before = asyncio.Barrier(BATCHES + 1)
    promoted = asyncio.Event()

    async def run_batch(batch: str) -> None:
        for _ in range(BEFORE_FAILOVER):
            await _one_request(client, batch, served)
        await before.wait()
        while not promoted.is_set():  # load while the master is gone and a replica takes over
            await _one_request(client, batch, served)
        for _ in range(AFTER_FAILOVER):
            await _one_request(client, batch, served)

    async def fail_over() -> None:
        await before.wait()
        old = stack.sentinels.master()
        old.kill()
        # The Sentinels' agreement is polled with blocking clients: in a thread of its own.
        await asyncio.to_thread(stack.sentinels.wait_for_new_master, old)
        promoted.set()

    try:
        await asyncio.gather(fail_over(), *(run_batch(batch) for batch in batches))
    finally:
        await client.close()
    return served


def test_a_master_failover_under_load_splits_no_batch_and_loses_no_record(
    failover_stack: FailoverStack,
) -> None:
    old_master = failover_stack.sentinels.master()

    served = asyncio.run(_drive(failover_stack))
    records = asyncio.run(
        drained(failover_stack.database_url, failover_stack.team_id, set(served.request_ids))
    )

    assert failover_stack.sentinels.master() is not old_master
    split = {
        batch: set(providers) for batch, providers in served.providers.items() if len(set(providers)) > 1
    }
    assert not split, f"batches served from more than one provider: {split}"
    ok = [r for r in records if r["status"] == 200]
    ok_ids = [r["request_id"] for r in ok]
    assert len(ok_ids) == len(set(ok_ids))  # no request has two records
    missing = set(served.request_ids) - set(ok_ids)
    assert not missing, f"{len(missing)} of {len(served.request_ids)} served requests have no record"
    assert set(ok_ids) == set(served.request_ids)  # and no 200 record without a 200 reply
    deployments: dict[str, set[str]] = defaultdict(set)
    for record in ok:
        deployments[record["batch_id"]].add(record["deployment"])
    assert all(len(used) == 1 for used in deployments.values()), deployments
    assert len(served.request_ids) >= BATCHES * (BEFORE_FAILOVER + AFTER_FAILOVER)
    print(
        f"\nfailover: {len(served.request_ids)} requests served, {served.failed_attempts} failed attempts "
        f"retried, {len(records) - len(ok)} non-200 records"
    )
