"""RedisLimiter on a real Redis: exact under concurrent load from two clients."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from redis.asyncio import Redis

from gateway.errors import GatewayError, QuotaExceeded, RateLimited
from gateway.limits import Admission, RedisLimiter, Reservation
from tests.unit.limits.conftest import Clock, principal, tokens, usage_event, usd

pytestmark = pytest.mark.integration

# A caller a window binds: its spend is settled in Redis at once (an unbound one's is held back)
BOUND = principal(key_rpm=10**6)


async def outcome(limiter: RedisLimiter, count: int, **limits: object) -> Admission | GatewayError:
    return await reserved(limiter, tokens(count), **limits)


async def reserved(
    limiter: RedisLimiter, reservation: Reservation, **limits: object
) -> Admission | GatewayError:
    try:
        return await limiter.admit(principal(**limits), reservation)
    except GatewayError as exc:
        return exc


async def test_200_concurrent_admissions_against_rpm_50_admit_exactly_50(
    redis_pair: tuple[Redis, Redis],
) -> None:
    clock = Clock()  # one instant for everyone: no refill can blur the count
    limiters = [RedisLimiter(redis, clock) for redis in redis_pair]

    outcomes = await asyncio.gather(*(outcome(limiters[i % 2], 0, team_rpm=50) for i in range(200)))

    admitted = [o for o in outcomes if isinstance(o, Admission)]
    refused = [o for o in outcomes if isinstance(o, RateLimited)]
    assert (len(admitted), len(refused)) == (50, 150)
    remaining = sorted(int(a.headers["x-ratelimit-remaining-requests"]) for a in admitted)
    assert remaining == list(range(50))  # each admission saw the one before it
    assert {r.headers["retry-after"] for r in refused} == {"2"}  # 1.2 s to the next slot


async def test_concurrent_token_reservations_never_exceed_the_window(redis_pair: tuple[Redis, Redis]) -> None:
    clock = Clock()
    limiters = [RedisLimiter(redis, clock) for redis in redis_pair]

    outcomes = await asyncio.gather(
        *(outcome(limiters[i % 2], 70, key_tpm=1000, team_rpm=1000) for i in range(100))
    )

    assert sum(isinstance(o, Admission) for o in outcomes) == 14  # 14 * 70 = 980 <= 1000 < 1050


async def test_redis_time_keeps_processes_on_one_clock(redis_pair: tuple[Redis, Redis]) -> None:
    limiters = [RedisLimiter(redis) for redis in redis_pair]  # windows on the server's TIME

    outcomes = await asyncio.gather(*(outcome(limiters[i % 2], 0, key_rpm=5) for i in range(60)))

    assert sum(isinstance(o, Admission) for o in outcomes) == 5  # the next slot is 12 s away


async def test_concurrent_settles_sum_exactly_and_the_budget_holds(redis_pair: tuple[Redis, Redis]) -> None:
    clock = Clock()
    limiters = [RedisLimiter(redis, clock) for redis in redis_pair]
    costs = [Decimal("0.0000013") * i + Decimal("0.0000000007") for i in range(400)]

    await asyncio.gather(
        *(limiters[i % 2].settle(BOUND, usage_event(clock, cost=str(c)), None) for i, c in enumerate(costs))
    )

    total = sum(costs, Decimal(0))
    assert await limiters[0].spent_usd("team", "team_a", "2026-11") == total
    assert isinstance(await outcome(limiters[1], 0, team_budget_usd=total), QuotaExceeded)
    assert isinstance(await outcome(limiters[1], 0, key_budget_usd=total + Decimal("1E-10")), Admission)


async def test_settles_still_count_after_redis_forgets_its_scripts(redis_pair: tuple[Redis, Redis]) -> None:
    """Settles run EVALSHA in a shared pipeline; a Redis restart empties its script cache."""
    clock = Clock()
    limiter = RedisLimiter(redis_pair[0], clock)
    await limiter.settle(BOUND, usage_event(clock, cost="0.25"), None)
    await redis_pair[0].script_flush()

    await asyncio.gather(*(limiter.settle(BOUND, usage_event(clock, cost="0.25"), None) for _ in range(3)))

    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("1.00")


async def test_200_concurrent_admissions_against_a_budget_for_10_admit_10(
    redis_pair: tuple[Redis, Redis],
) -> None:
    clock = Clock()
    limiters = [RedisLimiter(redis, clock) for redis in redis_pair]
    budget = {"team_budget_usd": Decimal("0.10")}

    outcomes = await asyncio.gather(*(reserved(limiters[i % 2], usd("0.01"), **budget) for i in range(200)))

    admitted = [o for o in outcomes if isinstance(o, Admission)]
    assert len(admitted) == 10
    assert all(isinstance(o, RateLimited) for o in outcomes if not isinstance(o, Admission))
    # Settled at 0.004 each, six more fit in what is left, and the spend never passes the budget
    await asyncio.gather(
        *(
            limiters[i % 2].settle(principal(**budget), usage_event(clock, cost="0.004"), a)
            for i, a in enumerate(admitted)
        )
    )
    again = await asyncio.gather(*(reserved(limiters[i % 2], usd("0.01"), **budget) for i in range(200)))
    assert sum(isinstance(o, Admission) for o in again) == 6
    assert await limiters[0].spent_usd("team", "team_a", "2026-11") == Decimal("0.04")


async def test_200_concurrent_admissions_against_a_token_limit_admit_what_it_holds(
    redis_pair: tuple[Redis, Redis],
) -> None:
    clock = Clock()
    limiters = [RedisLimiter(redis, clock) for redis in redis_pair]

    outcomes = await asyncio.gather(*(outcome(limiters[i % 2], 100, team_tpm=1000) for i in range(200)))

    assert sum(isinstance(o, Admission) for o in outcomes) == 10


async def test_a_negative_settle_on_real_redis_raises_nothing_and_counts_nothing(
    redis_pair: tuple[Redis, Redis],
) -> None:
    clock = Clock()
    limiter = RedisLimiter(redis_pair[0], clock)
    who = principal(team_budget_usd=Decimal("0.001"), team_tpm=1000)
    admission = await limiter.admit(who, usd("0.0001", 10))

    await limiter.settle(who, usage_event(clock, prompt=-100, completion=-5, cost="-3"), admission)

    assert await redis_pair[0].get("gw:{team:team_a}:spend:team:team_a:2026-11") is None
    assert isinstance(await reserved(limiter, usd("0.001", 10), team_budget_usd=Decimal("0.001")), Admission)
