from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.key_cache import KeyCache, publish_invalidation
from gateway.auth.secrets import hash_secret
from gateway.db import keys
from gateway.errors import AuthenticationFailed
from tests.unit.auth.records import QueryCounter, add_key, add_team

pytestmark = pytest.mark.integration

Sessions = async_sessionmaker[AsyncSession]


async def test_postgres_lookups_are_cached_and_coalesced(sessions: Sessions, engine: AsyncEngine) -> None:
    team = await add_team(sessions, allowed_regions=["eu-west", "us-east"])
    key, secret = await add_key(sessions, team.id, allowed_regions=["eu-west"])
    queries = QueryCounter().attach(engine)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=5.0)

    principals = await asyncio.gather(*(cache.authenticate(f"Bearer {secret}") for _ in range(20)))
    await cache.authenticate(f"Bearer {secret}")

    assert {p.key_id for p in principals} == {key.id}
    assert principals[0].allowed_regions == {"eu-west"}
    assert queries.key_lookups == 1


async def test_revocation_reaches_another_process_within_two_seconds(
    sessions: Sessions, redis_clients: tuple[Redis, Redis], channel: str
) -> None:
    team = await add_team(sessions)
    key, secret = await add_key(sessions, team.id)
    here = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[0], channel=channel)
    there = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[1], channel=channel)
    listener = asyncio.create_task(there.run_invalidation_listener())
    try:
        await asyncio.wait_for(there.subscribed.wait(), 2.0)
        await there.authenticate(f"Bearer {secret}")  # cached there for an hour

        started = time.monotonic()
        async with sessions.begin() as session:
            await keys.revoke_key(session, key.id)
        await here.invalidate(hash_secret(secret))
        await asyncio.wait_for(_until_rejected(there, secret), 2.0)
        assert time.monotonic() - started < 2.0
    finally:
        listener.cancel()


async def test_a_published_hash_is_evicted_by_every_listener(
    sessions: Sessions, redis_clients: tuple[Redis, Redis], channel: str
) -> None:
    team = await add_team(sessions)
    key, secret = await add_key(sessions, team.id)
    caches = [
        KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, redis=redis_clients[1], channel=channel)
        for _ in range(3)
    ]
    listeners = [asyncio.create_task(cache.run_invalidation_listener()) for cache in caches]
    try:
        for cache in caches:
            await asyncio.wait_for(cache.subscribed.wait(), 2.0)
            await cache.authenticate(f"Bearer {secret}")
        async with sessions.begin() as session:
            await keys.revoke_key(session, key.id)
        await publish_invalidation(redis_clients[0], hash_secret(secret), channel)  # what the CLI does
        for cache in caches:
            await asyncio.wait_for(_until_rejected(cache, secret), 2.0)
    finally:
        for listener in listeners:
            listener.cancel()


async def _until_rejected(cache: KeyCache, secret: str) -> None:
    while True:
        try:
            await cache.authenticate(f"Bearer {secret}")
        except AuthenticationFailed as exc:
            if exc.code != "api_key_revoked":
                raise
            return
        await asyncio.sleep(0.01)
