"""What the console remembers: sign-outs until their token's expiry, in memory and through Redis
(fakeredis here). Failed sign-ins: tests/unit/auth/test_attempts.py."""

from __future__ import annotations

from dataclasses import dataclass

import fakeredis

from gateway.console.auth.session_state import SignOuts


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_redis_shares_sign_outs_between_processes() -> None:
    redis = fakeredis.FakeAsyncRedis()
    clock = Clock()
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
