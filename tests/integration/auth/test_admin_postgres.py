from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.key_cache import KeyCache
from gateway.auth.secrets import hash_secret
from gateway.db.keys import key_state_loader
from gateway.db.models import ApiKey
from gateway.errors import AuthenticationFailed
from tests.unit.api.admin.conftest import ADMIN, ADMIN_KEY, StandInServices, admin_app, settings_with

pytestmark = pytest.mark.integration

Client = httpx.AsyncClient


@pytest.fixture
def services(
    sessions: async_sessionmaker[AsyncSession], redis_clients: tuple[Redis, Redis], channel: str
) -> StandInServices:
    cache = KeyCache(key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[0], channel=channel)
    return StandInServices(settings_with(ADMIN_KEY), sessions, cache, redis_clients[0])


@pytest.fixture
async def client(services: StandInServices) -> AsyncIterator[Client]:
    # AsyncTestClient runs the app on a portal thread's own event loop; asyncpg connections and
    # Redis clients belong to one loop, so these tests drive the app in the test's loop instead.
    transport = httpx.ASGITransport(app=admin_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def test_team_and_key_lifecycle_on_postgres(
    client: Client,
    services: StandInServices,
    sessions: async_sessionmaker[AsyncSession],
    redis_clients: tuple[Redis, Redis],
    channel: str,
) -> None:
    team = await client.post(
        "/admin/teams", headers=ADMIN, json={"name": "eval", "monthly_budget_usd": "99.99", "tpm_limit": 10}
    )
    assert team.status_code == 201
    assert team.json()["monthly_budget_usd"] == "99.99"
    team_id = team.json()["id"]

    created = await client.post(
        "/admin/keys", headers=ADMIN, json={"team_id": team_id, "name": "nightly", "expires_in_s": 86400}
    )
    assert created.status_code == 201
    secret, key_id = created.json()["key"], created.json()["id"]
    async with sessions() as session:
        row = await session.scalar(select(ApiKey).where(ApiKey.id == key_id))
    assert row is not None
    assert row.key_hash == hash_secret(secret)

    other_process = KeyCache(
        key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[1], channel=channel
    )
    listener = asyncio.create_task(other_process.run_invalidation_listener())
    try:
        await asyncio.wait_for(other_process.subscribed.wait(), 2.0)
        principal = await other_process.authenticate(f"Bearer {secret}")
        assert principal.team_id == team_id
        assert principal.team_tpm == 10

        assert (await client.delete(f"/admin/keys/{key_id}", headers=ADMIN)).status_code == 200
        for _ in range(200):
            try:
                await other_process.authenticate(f"Bearer {secret}")
            except AuthenticationFailed:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the other process still accepts the revoked key after 2 s")
    finally:
        listener.cancel()


async def test_a_weight_patch_reaches_another_process(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    redis_clients: tuple[Redis, Redis],
    channel: str,
) -> None:
    team = (await client.post("/admin/teams", headers=ADMIN, json={"name": "weighted", "weight": 2})).json()
    assert team["weight"] == 2
    key = (await client.post("/admin/keys", headers=ADMIN, json={"team_id": team["id"], "name": "k"})).json()

    other_process = KeyCache(
        key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[1], channel=channel
    )
    listener = asyncio.create_task(other_process.run_invalidation_listener())
    try:
        await asyncio.wait_for(other_process.subscribed.wait(), 2.0)
        assert (await other_process.authenticate(f"Bearer {key['key']}")).team_weight == 2

        patched = await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"weight": 0.5})
        assert patched.json()["weight"] == 0.5
        for _ in range(200):
            if (await other_process.authenticate(f"Bearer {key['key']}")).team_weight == 0.5:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the other process still sees the old weight after 2 s")
    finally:
        listener.cancel()


async def test_concurrent_creates_of_one_name_yield_one_team(client: Client) -> None:
    responses = await asyncio.gather(
        *(client.post("/admin/teams", headers=ADMIN, json={"name": "racing"}) for _ in range(8))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 7
    listed = (await client.get("/admin/teams", headers=ADMIN)).json()["data"]
    assert [t["name"] for t in listed] == ["racing"]
