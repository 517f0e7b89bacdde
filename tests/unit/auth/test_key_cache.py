from __future__ import annotations

import asyncio
import shutil
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import fakeredis
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.key_cache import KeyCache
from gateway.auth.secrets import hash_secret, new_key_secret
from gateway.db import keys, teams
from gateway.errors import AuthenticationFailed, ServiceUnavailable
from gateway.settings import load_settings
from tests.support.gateway import REPO
from tests.unit.auth.records import QueryCounter, add_key, add_team

Sessions = async_sessionmaker[AsyncSession]


@dataclass
class FakeClock:
    now: float

    def __call__(self) -> float:
        return self.now


async def issue(sessions: Sessions, **key_fields: object) -> tuple[str, str]:
    team = await add_team(sessions, allowed_models=["gpt-4o", "llama"], rpm_limit=100)
    key, secret = await add_key(sessions, team.id, **key_fields)
    return key.id, secret


async def revoke(sessions: Sessions, key_id: str) -> None:
    async with sessions.begin() as session:
        await keys.revoke_key(session, key_id)


async def test_a_valid_key_yields_its_principal(sessions: Sessions) -> None:
    key_id, secret = await issue(sessions, allowed_models=["llama", "claude"], tpm_limit=5000)
    principal = await KeyCache(keys.key_state_loader(sessions)).authenticate(f"Bearer {secret}")
    assert principal.key_id == key_id
    assert principal.key_prefix == secret[:12]
    assert principal.team_name == "research"
    assert principal.allowed_models == {"llama"}  # key and team lists intersected
    assert principal.allowed_regions is None
    assert (principal.team_rpm, principal.key_tpm) == (100, 5000)
    assert principal.team_weight == 1.0  # the default share


async def test_the_principal_carries_its_teams_weight(sessions: Sessions) -> None:
    team = await add_team(sessions, weight=2.5)
    _, secret = await add_key(sessions, team.id)
    principal = await KeyCache(keys.key_state_loader(sessions)).authenticate(f"Bearer {secret}")
    assert principal.team_weight == 2.5


async def test_the_second_call_does_not_query_the_database(sessions: Sessions, queries: QueryCounter) -> None:
    _, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=5.0)
    await cache.authenticate(f"Bearer {secret}")
    await cache.authenticate(f"Bearer {secret}")
    await cache.authenticate(f"Bearer {secret}")
    assert queries.key_lookups == 1


async def test_unknown_keys_are_cached_too(sessions: Sessions, queries: QueryCounter) -> None:
    cache = KeyCache(keys.key_state_loader(sessions))
    unknown = new_key_secret()
    for _ in range(3):
        with pytest.raises(AuthenticationFailed) as caught:
            await cache.authenticate(f"Bearer {unknown}")
        assert caught.value.message == "Invalid API key."
        assert unknown not in caught.value.message
    assert queries.key_lookups == 1


async def test_foreign_tokens_are_rejected_without_a_query(sessions: Sessions, queries: QueryCounter) -> None:
    with pytest.raises(AuthenticationFailed):
        await KeyCache(keys.key_state_loader(sessions)).authenticate("Bearer sk-proj-not-ours")
    assert queries.key_lookups == 0


async def test_entries_are_reloaded_after_the_ttl(sessions: Sessions, queries: QueryCounter) -> None:
    key_id, secret = await issue(sessions)
    clock = FakeClock(100.0)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=5.0, clock=clock)
    await cache.authenticate(f"Bearer {secret}")
    await revoke(sessions, key_id)
    clock.now = 104.9
    await cache.authenticate(f"Bearer {secret}")  # still cached: the TTL is the staleness bound
    clock.now = 105.1
    with pytest.raises(AuthenticationFailed) as caught:
        await cache.authenticate(f"Bearer {secret}")
    assert caught.value.code == "api_key_revoked"
    assert "revoked" in caught.value.message
    assert queries.key_lookups == 2


async def test_expiry_is_checked_on_every_call_even_from_cache(
    sessions: Sessions, queries: QueryCounter
) -> None:
    _, secret = await issue(sessions, expires_in_s=60)
    wall = FakeClock(time.time())
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, wall_clock=wall)
    await cache.authenticate(f"Bearer {secret}")
    wall.now += 61
    with pytest.raises(AuthenticationFailed) as caught:
        await cache.authenticate(f"Bearer {secret}")
    assert caught.value.code == "api_key_expired"
    assert caught.value.message == "This API key has expired."
    assert queries.key_lookups == 1


async def test_concurrent_misses_share_one_query(sessions: Sessions, queries: QueryCounter) -> None:
    _, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions))
    principals = await asyncio.gather(*(cache.authenticate(f"Bearer {secret}") for _ in range(50)))
    assert len({p.key_id for p in principals}) == 1
    assert queries.key_lookups == 1


async def test_a_cancelled_caller_does_not_cancel_the_shared_query(sessions: Sessions) -> None:
    _, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions))
    first = asyncio.create_task(cache.authenticate(f"Bearer {secret}"))
    second = asyncio.create_task(cache.authenticate(f"Bearer {secret}"))
    await asyncio.sleep(0)
    first.cancel()
    assert (await second).key_prefix == secret[:12]


async def test_invalidate_evicts_locally(sessions: Sessions, queries: QueryCounter) -> None:
    key_id, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0)
    await cache.authenticate(f"Bearer {secret}")
    await revoke(sessions, key_id)
    await cache.invalidate(hash_secret(secret))
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await cache.authenticate(f"Bearer {secret}")
    assert queries.key_lookups == 2


async def test_a_deleted_team_locks_out_its_keys(sessions: Sessions) -> None:
    _, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=0.0)
    principal = await cache.authenticate(f"Bearer {secret}")
    async with sessions.begin() as session:
        await teams.delete_team(session, principal.team_id)
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await cache.authenticate(f"Bearer {secret}")


async def test_known_keys_are_served_stale_while_the_database_is_down(
    sessions: Sessions, engine: AsyncEngine, tmp_path: Path
) -> None:
    _, secret = await issue(sessions)
    clock = FakeClock(0.0)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=5.0, clock=clock)
    known = await cache.authenticate(f"Bearer {secret}")

    shutil.rmtree(tmp_path / "db")  # the database file is gone: every new connection fails
    await engine.dispose()
    clock.now = 60.0

    assert await cache.authenticate(f"Bearer {secret}") == known
    with pytest.raises(ServiceUnavailable) as caught:
        await cache.authenticate(f"Bearer {new_key_secret()}")
    assert caught.value.status == 503
    assert caught.value.code == "service_unavailable"


@pytest.fixture
async def fake_redis_pair() -> AsyncIterator[tuple[fakeredis.FakeAsyncRedis, fakeredis.FakeAsyncRedis]]:
    server = fakeredis.FakeServer()
    first, second = fakeredis.FakeAsyncRedis(server=server), fakeredis.FakeAsyncRedis(server=server)
    yield first, second
    await first.aclose()
    await second.aclose()


async def test_revocation_reaches_another_process_through_redis(
    sessions: Sessions, fake_redis_pair: tuple[fakeredis.FakeAsyncRedis, fakeredis.FakeAsyncRedis]
) -> None:
    key_id, secret = await issue(sessions)
    here = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, redis=fake_redis_pair[0])
    there = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, redis=fake_redis_pair[1])
    listener = asyncio.create_task(there.run_invalidation_listener())
    try:
        await asyncio.wait_for(there.subscribed.wait(), 2.0)
        await there.authenticate(f"Bearer {secret}")
        await revoke(sessions, key_id)
        await here.invalidate(hash_secret(secret))
        await asyncio.wait_for(_until_rejected(there, secret), 2.0)
    finally:
        listener.cancel()


async def _until_rejected(cache: KeyCache, secret: str) -> None:
    while True:
        try:
            await cache.authenticate(f"Bearer {secret}")
        except AuthenticationFailed:
            return
        await asyncio.sleep(0.01)


async def test_concurrent_lookups_of_one_unknown_key_share_one_query(
    sessions: Sessions, queries: QueryCounter
) -> None:
    cache = KeyCache(keys.key_state_loader(sessions))
    header = f"Bearer {new_key_secret()}"
    outcomes = await asyncio.gather(*(cache.authenticate(header) for _ in range(50)), return_exceptions=True)
    for _ in range(50):
        with pytest.raises(AuthenticationFailed):
            await cache.authenticate(header)
    assert all(isinstance(outcome, AuthenticationFailed) for outcome in outcomes)
    assert queries.key_lookups == 1


async def test_a_key_that_appears_after_being_unknown_works_once_the_unknown_ttl_passes(
    sessions: Sessions, queries: QueryCounter
) -> None:
    clock = FakeClock(100.0)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, unknown_ttl_s=2.0, clock=clock)
    secret = new_key_secret()
    with pytest.raises(AuthenticationFailed):
        await cache.authenticate(f"Bearer {secret}")
    key_id, _ = await issue(sessions)
    async with sessions.begin() as session:  # the key now has the hash that was unknown
        (await keys.get_key(session, key_id)).key_hash = hash_secret(secret)

    clock.now = 101.9
    with pytest.raises(AuthenticationFailed):
        await cache.authenticate(f"Bearer {secret}")  # still remembered as unknown: no query
    clock.now = 102.1
    assert (await cache.authenticate(f"Bearer {secret}")).key_id == key_id
    assert queries.key_lookups == 2


async def test_an_invalidation_forgets_an_unknown_hash(sessions: Sessions, queries: QueryCounter) -> None:
    cache = KeyCache(keys.key_state_loader(sessions), unknown_ttl_s=3600.0)
    secret = new_key_secret()
    with pytest.raises(AuthenticationFailed):
        await cache.authenticate(f"Bearer {secret}")
    cache.evict(hash_secret(secret))  # what a message on the invalidation channel does
    with pytest.raises(AuthenticationFailed):
        await cache.authenticate(f"Bearer {secret}")
    assert queries.key_lookups == 2


async def test_a_flood_of_unknown_keys_is_bounded_and_leaves_known_keys_cached(
    sessions: Sessions, queries: QueryCounter
) -> None:
    _, secret = await issue(sessions)
    cache = KeyCache(keys.key_state_loader(sessions), ttl_s=3600.0, max_entries=10, max_unknown=100)
    await cache.authenticate(f"Bearer {secret}")
    for _ in range(300):
        with pytest.raises(AuthenticationFailed):
            await cache.authenticate(f"Bearer {new_key_secret()}")
    assert cache.unknown_hashes == 100
    await cache.authenticate(f"Bearer {secret}")  # not pushed out by the flood
    assert queries.key_lookups == 301


async def test_the_memory_of_unknown_keys_stops_growing_at_its_bound() -> None:
    asked = 0

    async def nobody(_: str) -> None:
        nonlocal asked
        asked += 1

    cache = KeyCache(nobody, max_unknown=1000)

    async def flood(count: int) -> None:
        for _ in range(count):
            with pytest.raises(AuthenticationFailed):
                await cache.authenticate(f"Bearer {new_key_secret()}")

    await flood(2000)  # past the bound, and past any resize that reaching it causes
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await flood(20_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert asked == 22_000  # one query per distinct key
    assert cache.unknown_hashes == 1000
    # The 1,000 hashes now remembered were allocated while traced (~150 kB); keeping all 20,000
    # would have taken some 3 MB.
    assert grown < 500_000


def test_the_unknown_ttl_is_a_setting() -> None:
    environ = {
        "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
        "GATEWAY_KEY_CACHE_UNKNOWN_TTL_S": "2",
    }
    assert load_settings(environ).key_cache_unknown_ttl_s == 2.0
    assert load_settings({"GATEWAY_CONFIG": environ["GATEWAY_CONFIG"]}).key_cache_unknown_ttl_s == 5.0
