"""Batch pins: one atomic first placement, idle expiry, confirm, one move while unconfirmed.

Every test runs against the in-memory store, Redis faked by fakeredis, and a real Redis
(the routing tests' own db, flushed before and after).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import fakeredis
import pytest
from redis.asyncio import Redis

from gateway.routing.batch_pin import BatchPin, PinStoreUnavailable, new_pin
from gateway.routing.pins import MemoryPinStore, PinStore, RedisPinStore
from tests.support.stores import redis_url
from tests.unit.routing.catalog import CHAT

REAL_REDIS = redis_url("routing")
US, EU, CLAUDE = CHAT["openai-us"], CHAT["vllm-eu"], CHAT["claude-us"]


@dataclass
class Backend:
    make: Callable[[float], PinStore]  # idle ttl in seconds -> a store
    advance: Callable[[float], Awaitable[None]]  # let this much idle time pass


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = FakeClock()

        async def tick(seconds: float) -> None:
            clock.now += seconds

        yield Backend(lambda ttl: MemoryPinStore(ttl, clock=clock), tick)
        return
    # the gateway's pool allows hundreds of concurrent commands, as the concurrency tests need
    redis = (
        fakeredis.FakeAsyncRedis(max_connections=1024)
        if request.param == "fakeredis"
        else Redis.from_url(REAL_REDIS, max_connections=1024)
    )
    await redis.flushdb()

    async def wait(seconds: float) -> None:
        await asyncio.sleep(seconds)

    yield Backend(lambda ttl: RedisPinStore(redis, ttl), wait)
    await redis.flushdb()
    await redis.aclose()


def pin_for(batch: str, deployment: object = US, at: float | None = None, team: str = "team-1") -> BatchPin:
    return new_pin(team, batch, deployment, time.time() if at is None else at)  # type: ignore[arg-type]


async def test_no_pin_before_placement(backend: Backend) -> None:
    store = backend.make(60)
    assert await store.touch("team-1", "b") is None
    assert await store.active_count() == 0


async def test_place_then_touch(backend: Backend) -> None:
    store = backend.make(60)
    placed = await store.place(pin_for("b", EU))
    assert (placed.deployment, placed.provider, placed.region, placed.model) == (
        EU.id,
        "vllm-eu",
        "eu-west",
        "chat",
    )
    assert not placed.confirmed and placed.moves == 0
    touched = await store.touch("team-1", "b")
    assert touched is not None and touched.deployment == EU.id
    assert await store.active_count() == 1


async def test_first_placement_wins(backend: Backend) -> None:
    store = backend.make(60)
    await store.place(pin_for("b", US))
    second = await store.place(pin_for("b", EU))
    assert second.deployment == US.id


async def test_batches_are_scoped_by_team(backend: Backend) -> None:
    store = backend.make(60)
    await store.place(pin_for("b", US, team="team-1"))
    other = await store.place(pin_for("b", EU, team="team-2"))
    assert other.deployment == EU.id
    assert await store.touch("team-3", "b") is None


async def test_200_concurrent_first_placements_agree(backend: Backend) -> None:
    store = backend.make(60)
    choices = [US, EU, CLAUDE]
    placed = await asyncio.gather(*(store.place(pin_for("hot", choices[i % 3])) for i in range(200)))
    assert len({p.deployment for p in placed}) == 1
    current = await store.touch("team-1", "hot")
    assert current is not None and current.deployment == placed[0].deployment


async def test_created_is_the_earliest_joining_arrival(backend: Backend) -> None:
    store = backend.make(3600)
    now = time.time()
    await store.place(pin_for("b", US, at=now))
    joined = await store.place(pin_for("b", EU, at=now - 0.5))  # arrived earlier, placed later
    assert joined.created_at == pytest.approx(now - 0.5)
    touched = await store.touch("team-1", "b", joined_at=now - 2.0)
    assert touched is not None and touched.created_at == pytest.approx(now - 2.0)
    later = await store.touch("team-1", "b", joined_at=now + 5)
    assert later is not None and later.created_at == pytest.approx(now - 2.0)


async def test_idle_pin_expires(backend: Backend) -> None:
    store = backend.make(0.2)
    await store.place(pin_for("b", US))
    await backend.advance(0.6)
    assert await store.touch("team-1", "b") is None
    fresh = await store.place(pin_for("b", EU))
    assert fresh.deployment == EU.id and not fresh.confirmed


async def test_use_pushes_expiry_back(backend: Backend) -> None:
    store = backend.make(1.0)
    await store.place(pin_for("b", US))
    for _ in range(4):
        await backend.advance(0.4)
        assert await store.touch("team-1", "b") is not None


async def test_confirm_makes_the_pin_final(backend: Backend) -> None:
    store = backend.make(60)
    placed = await store.place(pin_for("b", US))
    await store.confirm("team-1", "b", US.id)
    confirmed = await store.touch("team-1", "b")
    assert confirmed is not None and confirmed.confirmed
    after = await store.move(placed, EU)
    assert after.deployment == US.id and after.moves == 0


async def test_confirm_for_another_deployment_is_ignored(backend: Backend) -> None:
    store = backend.make(60)
    await store.place(pin_for("b", US))
    await store.confirm("team-1", "b", EU.id)
    pin = await store.touch("team-1", "b")
    assert pin is not None and not pin.confirmed


async def test_confirm_after_delete_does_not_resurrect(backend: Backend) -> None:
    store = backend.make(60)
    await store.place(pin_for("b", US))
    assert await store.delete("team-1", "b")
    await store.confirm("team-1", "b", US.id)
    assert await store.touch("team-1", "b") is None
    fresh = await store.place(pin_for("b", US))
    assert not fresh.confirmed


async def test_move_while_unconfirmed_happens_once(backend: Backend) -> None:
    store = backend.make(60)
    placed = await store.place(pin_for("b", US))
    moved = await store.move(placed, EU)
    assert (moved.deployment, moved.provider, moved.region, moved.moves) == (EU.id, "vllm-eu", "eu-west", 1)
    stale = await store.move(placed, CLAUDE)  # a second request that also saw the old pin
    assert stale.deployment == EU.id and stale.moves == 1
    current = await store.touch("team-1", "b")
    assert current is not None and current.deployment == EU.id and current.moves == 1


async def test_concurrent_moves_agree(backend: Backend) -> None:
    store = backend.make(60)
    placed = await store.place(pin_for("b", US))
    targets = [EU, CLAUDE]
    results = await asyncio.gather(*(store.move(placed, targets[i % 2]) for i in range(100)))
    assert len({r.deployment for r in results}) == 1
    assert {r.moves for r in results} == {1}


async def test_move_of_a_vanished_pin_changes_nothing(backend: Backend) -> None:
    store = backend.make(60)
    placed = await store.place(pin_for("b", US))
    await store.delete("team-1", "b")
    assert (await store.move(placed, EU)).deployment == US.id
    assert await store.touch("team-1", "b") is None


async def test_delete(backend: Backend) -> None:
    store = backend.make(60)
    await store.place(pin_for("b", US))
    assert await store.delete("team-1", "b")
    assert not await store.delete("team-1", "b")
    assert await store.active_count() == 0


async def test_unreachable_redis_raises_pin_store_unavailable() -> None:
    redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    store = RedisPinStore(redis, 60)
    with pytest.raises(PinStoreUnavailable):
        await store.touch("team-1", "b")
    with pytest.raises(PinStoreUnavailable):
        await store.place(pin_for("b", US))
    await redis.aclose()


async def test_a_confirmed_pin_is_reused_for_a_moment_without_asking_redis() -> None:
    redis = fakeredis.FakeAsyncRedis()
    store = RedisPinStore(redis, 60, confirmed_cache_s=0.3)
    await store.place(pin_for("b", US))
    await store.confirm("team-1", "b", US.id)
    assert (await store.touch("team-1", "b")) is not None  # read and remembered
    await redis.flushdb()  # the pin vanishes behind the store's back
    assert (await store.touch("team-1", "b")) is not None, "served from the moment's copy"
    assert (await store.touch("team-1", "b", recent=False)) is None, "a fresh read sees the truth"
    await asyncio.sleep(0.35)
    assert (await store.touch("team-1", "b")) is None, "the copy expires"


async def test_an_unconfirmed_pin_is_always_read_from_redis() -> None:
    redis = fakeredis.FakeAsyncRedis()
    store = RedisPinStore(redis, 60, confirmed_cache_s=10)
    await store.place(pin_for("b", US))
    assert (await store.touch("team-1", "b")) is not None
    await redis.flushdb()
    assert (await store.touch("team-1", "b")) is None
