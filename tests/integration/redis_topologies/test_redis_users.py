"""Every part of the gateway that keeps state in Redis, against a 3-master Cluster and through a
Sentinel set: the client is the one `redis_client` builds from the URL, so a script, transaction
or pipeline whose keys span slots fails here as it would in production (CROSSSLOT)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import pytest
from redis.asyncio.cluster import RedisCluster

from gateway.auth.attempts import KeyAttempts, TooManyAttempts
from gateway.auth.key_cache import KeyCache, publish_invalidation
from gateway.auth.principal import KeyState, Principal
from gateway.console.auth.session_state import SessionRecord, SessionStore
from gateway.errors import RateLimited
from gateway.limits.redis.limiter import RedisLimiter
from gateway.limits.reservation import Reservation
from gateway.limits.spend import MonthSpend, month_of
from gateway.metering.events import UsageEvent, UsageSource
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.redis.client import RedisClient, redis_client
from gateway.redis.group_commit import PipelineBatcher
from gateway.redis.urls import Durability
from gateway.routing.batch_pin import new_pin
from gateway.routing.health import RedisHealthBoard
from gateway.routing.pins import RedisPinStore
from gateway.scheduling.permits import Caps
from gateway.scheduling.redis.permits import RedisPermits
from gateway.settings.catalog import CircuitSettings
from tests.integration.redis_topologies.servers import LocalCluster
from tests.unit.routing.catalog import CHAT

US, EU = CHAT["openai-us"], CHAT["vllm-eu"]
PRINCIPAL = Principal(
    key_id="key_a",
    key_prefix="sk-gw-aaaa",
    team_id="team_a",
    team_name="a",
    key_rpm=100,
    team_tpm=100_000,
    key_budget_usd=Decimal("1.00"),
    team_budget_usd=Decimal("2.00"),
)


def durability_of(client: RedisClient) -> Durability:
    """What the fixture's URL asks for: WAIT for one replica through Sentinel, none in a Cluster."""
    return Durability() if isinstance(client, RedisCluster) else Durability(min_replicas=1)


def usage_event(request_id: str, cost: str = "0.10") -> UsageEvent:
    return UsageEvent(
        request_id=request_id,
        created_at=time.time(),
        team_id=PRINCIPAL.team_id,
        key_id=PRINCIPAL.key_id,
        model="chat",
        provider="openai-us",
        region="us-east",
        deployment=US.id,
        upstream_model="gpt-x",
        endpoint="chat/completions",
        status=200,
        prompt_tokens=100,
        completion_tokens=20,
        usage_source=UsageSource.UPSTREAM,
        cost=Decimal(cost),
        uncached_cost=Decimal(cost),
        latency_ms=10.0,
    )


async def test_pins_place_once_confirm_move_and_delete(topology_client: RedisClient) -> None:
    store = RedisPinStore(topology_client, 60, durability=durability_of(topology_client))

    placed = await asyncio.gather(
        *(store.place(new_pin("team_a", "batch-1", US if i % 2 else EU, time.time())) for i in range(20))
    )
    assert len({pin.deployment for pin in placed}) == 1  # concurrent first requests agree
    first = placed[0]
    other = EU if first.deployment == US.id else US
    moved = await store.move(first, other)
    assert moved.deployment == other.id and moved.moves == 1
    await store.confirm("team_a", "batch-1", other.id)
    touched = await store.touch("team_a", "batch-1", recent=False)
    assert touched is not None and touched.confirmed and touched.deployment == other.id
    assert (await store.move(touched, US if other is EU else EU)).deployment == other.id  # final now
    assert await store.active_count() == 1
    assert await store.delete("team_a", "batch-1")
    assert await store.touch("team_a", "batch-1", recent=False) is None
    assert await store.active_count() == 0


async def test_limiter_admits_settles_and_refuses_across_key_and_team(topology_client: RedisClient) -> None:
    batcher = PipelineBatcher(topology_client, durability=durability_of(topology_client))
    limiter = RedisLimiter(topology_client, batcher=batcher)
    month = month_of(time.time())
    await limiter.reconcile(MonthSpend(month, teams={"team_a": 0}, keys={("team_a", "key_a"): 0}))

    admission = await limiter.admit(PRINCIPAL, Reservation(tokens=120, units=10**9))
    assert admission.hold is not None
    await limiter.settle(PRINCIPAL, usage_event("req-1", cost="0.95"), admission)

    assert await limiter.spent_usd("key", "key_a", month, "team_a") == Decimal("0.95")
    assert await limiter.spent_usd("team", "team_a", month) == Decimal("0.95")
    assert not limiter.degraded  # every script ran: no CROSSSLOT sent it to the local fallback
    with pytest.raises(RateLimited):  # 0.95 of the key's 1.00 spent: 0.10 more does not fit
        await limiter.admit(PRINCIPAL, Reservation(tokens=10, units=10**9))


async def test_limiter_flushes_spend_settled_during_an_outage_per_team(topology_client: RedisClient) -> None:
    limiter = RedisLimiter(topology_client)
    month = month_of(time.time())
    others = Principal(key_id="key_b", key_prefix="sk-gw-bbbb", team_id="team_b", team_name="b", key_rpm=10)
    # What two teams settled while Redis was unreachable (as `_failed` records it): two slots.
    limiter._pending = {
        "gw:{team:team_a}:spend:team:team_a:" + month: 5,
        "gw:{team:team_b}:spend:team:team_b:" + month: 7,
    }

    await limiter.admit(others, Reservation(tokens=1, units=0))

    assert not limiter.degraded
    assert await limiter.spent_usd("team", "team_a", month) == Decimal(5) / 10**10
    assert await limiter.spent_usd("team", "team_b", month) == Decimal(7) / 10**10


async def test_permits_acquire_and_release_at_a_capped_replica(topology_client: RedisClient) -> None:
    batcher = PipelineBatcher(topology_client)
    banks = [RedisPermits(topology_client, batcher, process=f"process-{i}") for i in range(2)]
    caps = Caps(max_concurrency=3)

    granted = [await banks[i % 2].acquire("east:8000", 1, caps, waiting=0) for i in range(4)]
    assert granted == [True, True, True, False]  # the cap holds in sum across both processes
    banks[0].release("east:8000", 1)
    for _ in range(50):
        if (await banks[1].totals("east:8000")).in_flight == 2:
            break
        await asyncio.sleep(0.02)
    assert await banks[1].acquire("east:8000", 1, caps, waiting=0)
    for bank in banks:
        await bank.aclose()


async def test_usage_buffer_appends_reads_acks_and_reclaims(topology_client: RedisClient) -> None:
    batcher = PipelineBatcher(topology_client, durability=durability_of(topology_client))
    buffer = RedisStreamBuffer(topology_client, consumer="dead-writer", batcher=batcher)
    await asyncio.gather(*(buffer.append(usage_event(f"req-{i}")) for i in range(30)))
    assert not buffer.spooling  # every append was acknowledged (by a replica too, via Sentinel)

    read = await buffer.read(20, block_ms=0)
    assert len(read) == 20 and await buffer.depth() == 30
    await buffer.ack([entry_id for entry_id, _ in read[:10]])
    taker = RedisStreamBuffer(topology_client, consumer="live-writer", batcher=batcher)
    claimed = await taker.reclaim(min_idle_ms=0, max_count=100)  # what the dead writer left pending
    assert sorted(e.request_id for _, e in claimed) == sorted(e.request_id for _, e in read[10:])
    rest = await taker.read(100, block_ms=0)
    await taker.ack([i for i, _ in claimed + rest])
    assert len(rest) == 10 and await taker.depth() == 0


async def test_key_revocations_reach_every_process(topology_client: RedisClient) -> None:
    async def load(key_hash: str) -> KeyState | None:
        return KeyState(PRINCIPAL)

    cache = KeyCache(load, ttl_s=3600, redis=topology_client, reconnect_delay_s=0.1)
    listener = asyncio.create_task(cache.run_invalidation_listener())
    try:
        await asyncio.wait_for(cache.subscribed.wait(), 10)
        await cache.verify("hash-1")
        assert cache.known_keys == 1
        await publish_invalidation(topology_client, "hash-1")
        for _ in range(100):
            if cache.known_keys == 0:
                break
            await asyncio.sleep(0.02)
        assert cache.known_keys == 0
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)


async def test_console_sessions_and_failed_key_attempts_are_shared(topology_client: RedisClient) -> None:
    record = SessionRecord(expires_at=int(time.time()) + 60, seal="s", key_id="key_a", team_id="team_a")
    signed_in, elsewhere = SessionStore.of(topology_client), SessionStore.of(topology_client)
    await signed_in.put("sid-1", record, 60)
    assert await elsewhere.get("sid-1") == record
    await elsewhere.delete("sid-1")
    assert await signed_in.get("sid-1") is None
    failures, other = KeyAttempts(topology_client, limit=2), KeyAttempts(topology_client, limit=2)

    async def refused() -> None:
        return None

    await failures.check("10.0.0.1", "wrong", refused)
    await failures.check("10.0.0.1", "wrong", refused)
    with pytest.raises(TooManyAttempts):
        await other.check("10.0.0.1", "wrong", refused)


async def test_circuits_are_shared(topology_client: RedisClient) -> None:
    settings = CircuitSettings(failure_threshold=2, cooldown_s=60)
    boards = [RedisHealthBoard(topology_client, [US.id, EU.id], settings) for _ in range(2)]
    await boards[0].record_failure(US.id)
    await boards[1].record_failure(US.id)
    await boards[0].refresh()
    assert set(boards[0].open_circuits()) == {US.id} and not boards[0].degraded


async def test_a_clusters_keys_spread_over_every_master(cluster: LocalCluster) -> None:
    cluster.flush()
    client = redis_client(cluster.url)
    try:
        store, limiter = RedisPinStore(client, 60), RedisLimiter(client)
        for i in range(30):
            await store.place(new_pin(f"team-{i}", "b", US, time.time()))
            team = Principal(key_id=f"key-{i}", key_prefix="p", team_id=f"team-{i}", team_name="t", key_rpm=5)
            await limiter.admit(team, Reservation(tokens=1, units=0))
    finally:
        await client.aclose()
    assert all(len(keys) > 5 for keys in cluster.keys_per_node())  # the hash tags are per team and batch
