"""What the console remembers: sign-outs until their token's expiry, failed sign-ins per address and
window, in memory and through Redis (fakeredis here)."""

from __future__ import annotations

from dataclasses import dataclass

import fakeredis
import pytest

from gateway.console.session_state import FailedSignIns, SignOuts


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_failed_sign_ins_block_an_address_for_its_window() -> None:
    clock = Clock()
    failures = FailedSignIns(limit=3, window_s=60, clock=clock)
    for _ in range(3):
        assert not await failures.blocked(None, "10.0.0.1")
        await failures.record(None, "10.0.0.1")
    assert await failures.blocked(None, "10.0.0.1")
    assert not await failures.blocked(None, "10.0.0.2"), "per address"
    clock.now += 60
    assert not await failures.blocked(None, "10.0.0.1"), "a new window"


@pytest.mark.parametrize("kind", ["failures", "sign-outs"])
async def test_redis_shares_them_between_processes(kind: str) -> None:
    redis = fakeredis.FakeAsyncRedis()
    clock = Clock()
    if kind == "failures":
        here, there = FailedSignIns(2, 60, clock), FailedSignIns(2, 60, clock)
        await here.record(redis, "a")
        await here.record(redis, "a")
        assert await there.blocked(redis, "a")
        assert 0 < await redis.ttl("gateway:console:failed-sign-ins:a") <= 60
    else:
        signed_out, elsewhere = SignOuts(clock), SignOuts(clock)
        await signed_out.add(redis, "sid-1", expires_at=clock.now + 30)
        assert await elsewhere.contains(redis, "sid-1") and not await elsewhere.contains(redis, "sid-2")
        assert 0 < await redis.ttl("gateway:console:signed-out:sid-1") <= 31
    await redis.aclose()


async def test_a_sign_out_is_remembered_here_until_its_token_expires() -> None:
    clock = Clock()
    sign_outs = SignOuts(clock)
    await sign_outs.add(None, "old", expires_at=clock.now + 10)
    assert await sign_outs.contains(None, "old")
    clock.now += 11
    await sign_outs.add(None, "new", expires_at=clock.now + 10)  # adding forgets the expired
    assert not await sign_outs.contains(None, "old") and await sign_outs.contains(None, "new")
