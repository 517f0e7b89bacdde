"""The console's session store: records shared through Redis (fakeredis here), kept in memory
without it, gone for every process once deleted, and an unreachable Redis said so."""

from __future__ import annotations

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.console.auth.session_state import SessionRecord, SessionStore, SessionsUnavailable

RECORD = SessionRecord(expires_at=2_000_000_000, seal="s", key_id="key_1", team_id="team_1")


async def test_redis_shares_sessions_and_their_end_between_processes() -> None:
    redis = fakeredis.FakeAsyncRedis()
    here, elsewhere = SessionStore.of(redis), SessionStore.of(redis)
    await here.put("sid-1", RECORD, ttl_s=30)
    assert await elsewhere.get("sid-1") == RECORD and await elsewhere.get("sid-2") is None
    assert 0 < await redis.ttl("gateway:console:session:sid-1") <= 30
    await elsewhere.delete("sid-1")
    assert await here.get("sid-1") is None
    await redis.aclose()


async def test_a_record_names_a_key_by_its_id_and_nothing_of_the_key() -> None:
    redis = fakeredis.FakeAsyncRedis()
    await SessionStore.of(redis).put("sid-1", RECORD, ttl_s=30)
    stored = await redis.get("gateway:console:session:sid-1")
    assert set(__import__("json").loads(stored)) == {"expires_at", "seal", "key_id", "team_id"}
    await redis.aclose()


async def test_without_redis_the_process_keeps_them() -> None:
    store = SessionStore.of(None)
    await store.put("sid-1", RECORD, ttl_s=30)
    assert await store.get("sid-1") == RECORD
    await store.delete("sid-1")
    assert await store.get("sid-1") is None


async def test_a_record_that_is_not_one_is_no_session() -> None:
    redis = fakeredis.FakeAsyncRedis()
    await redis.set("gateway:console:session:junk", b"{not json")
    assert await SessionStore.of(redis).get("junk") is None
    await redis.aclose()


async def test_an_unreachable_redis_is_sessions_unavailable_not_a_crash() -> None:
    class Down(fakeredis.FakeAsyncRedis):
        async def execute_command(self, *args: object, **options: object) -> object:
            raise RedisConnectionError("down")

    store = SessionStore.of(Down())
    for operation in (store.get("sid"), store.put("sid", RECORD, ttl_s=30), store.delete("sid")):
        with pytest.raises(SessionsUnavailable):
            await operation
