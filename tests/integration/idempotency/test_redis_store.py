"""Slots in the test session's Redis: claimed once across processes, held with the lease and then
the window as their TTLs, stored, released and renewed only by their claim's owner; two gateway processes
(two `IdempotentRequests` on one Redis) share one run of a key, the second polling for it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.idempotency.keys import idempotent_request
from gateway.idempotency.records import Claim, StoredAnswer
from gateway.idempotency.redis_store import RedisIdempotencyStore
from gateway.idempotency.service import REPLAY_HEADER, ErrorAnswer, IdempotentRequests
from gateway.proxy.exchange import ProxyResult
from tests.support.stores import redis_url

URL = redis_url("redis")
FIRST, SECOND = Claim("fp", "req_1"), Claim("fp", "req_2")
ANSWER = StoredAnswer("fp", 200, {"x-request-id": "req_1"}, body=b'{"id": 1}')


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, str]]:
    """The session's Redis, and a key prefix of this test's own (removed after it)."""
    client = Redis.from_url(URL)
    prefix = f"gw:idem-test-{uuid.uuid4().hex[:8]}:"
    yield client, prefix
    async for key in client.scan_iter(match=prefix + "*"):
        await client.delete(key)
    await client.aclose()


async def test_a_slot_is_claimed_once_then_holds_the_answer_for_the_window(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisIdempotencyStore(client, prefix)

    assert await store.claim("team:k", FIRST, lease_s=30) is None
    assert 29_000 < await client.pttl(prefix + "team:k") <= 30_000
    assert await store.claim("team:k", SECOND, lease_s=30) == FIRST
    await store.keep("team:k", FIRST, ANSWER, window_s=3600)

    assert await store.claim("team:k", SECOND, lease_s=30) == ANSWER
    assert 3_599_000 < await client.pttl(prefix + "team:k") <= 3_600_000


async def test_only_the_owner_stores_or_releases(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisIdempotencyStore(client, prefix)
    await store.claim("team:k", FIRST, lease_s=30)

    await store.keep("team:k", SECOND, ANSWER, window_s=60)
    await store.release("team:k", SECOND)
    assert await store.claim("team:k", SECOND, lease_s=30) == FIRST
    await store.release("team:k", FIRST)
    assert await store.claim("team:k", SECOND, lease_s=30) is None


async def test_a_claim_frees_itself_when_its_lease_ends(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisIdempotencyStore(client, prefix)
    await store.claim("team:k", FIRST, lease_s=0.1)
    await asyncio.sleep(0.2)

    assert await store.claim("team:k", SECOND, lease_s=30) is None
    await store.keep("team:k", FIRST, ANSWER, window_s=60)  # the first's lease is over: not its slot
    assert await store.claim("team:k", Claim("fp", "req_3"), lease_s=30) == SECOND


async def test_only_the_owner_renews_a_claims_lease(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisIdempotencyStore(client, prefix)
    await store.claim("team:k", FIRST, lease_s=1)

    await store.renew("team:k", SECOND, lease_s=30)
    assert await client.pttl(prefix + "team:k") <= 1_000
    await store.renew("team:k", FIRST, lease_s=30)
    assert 29_000 < await client.pttl(prefix + "team:k") <= 30_000
    await store.keep("team:k", FIRST, ANSWER, window_s=3600)
    await store.renew("team:k", FIRST, lease_s=30)  # an answer is no claim: its window stands
    assert 3_599_000 < await client.pttl(prefix + "team:k") <= 3_600_000


async def test_what_redis_holds_names_neither_the_key_nor_another_team(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    ours = idempotent_request("team-a", "order-77", "POST", "/v1/chat/completions", b"{}")
    theirs = idempotent_request("team-b", "order-77", "POST", "/v1/chat/completions", b"{}")
    store = RedisIdempotencyStore(client, prefix)
    await store.claim(ours.slot, Claim(ours.fingerprint, "req_1"), lease_s=30)

    assert await store.claim(theirs.slot, Claim(theirs.fingerprint, "req_2"), lease_s=30) is None
    keys = [key async for key in client.scan_iter(match=prefix + "*")]
    assert len(keys) == 2 and not any(b"order-77" in key for key in keys)


async def test_two_processes_share_one_run_of_a_key(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    runs: list[str] = []

    async def run() -> ProxyResult:
        runs.append("run")
        await asyncio.sleep(0.3)
        return ProxyResult({"x-request-id": f"req_{len(runs)}"}, body=b'{"answer": 1}')

    def refused(exc: object) -> ErrorAnswer:
        raise AssertionError("no error expected")

    outcomes: list[str] = []
    processes = [
        IdempotentRequests(RedisIdempotencyStore(client, prefix), 60.0, 30.0, 10_000, count=outcomes.append)
        for _ in range(2)
    ]
    request = idempotent_request("team-a", "k", "POST", "/v1/chat/completions", b"{}")
    first = asyncio.create_task(processes[0].serve(request, "req_a", run, refused))
    await asyncio.sleep(0.05)
    second = await processes[1].serve(request, "req_b", run, refused)

    assert runs == ["run"]
    assert second.headers == {"x-request-id": "req_1", REPLAY_HEADER: "true"}
    assert outcomes == ["first", "replayed"]
    assert (await first).body == second.body
