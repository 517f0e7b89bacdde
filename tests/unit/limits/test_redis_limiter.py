"""RedisLimiter specifics on fakeredis: shared state, key layout, Redis's clock, outages."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import fakeredis
import pytest
from fakeredis.aioredis import FakeRedis
from structlog.testing import capture_logs

from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits import MonthSpend, RedisLimiter
from gateway.limits.redis_limiter import _SETTLE, DEFERRED_SPEND_S
from gateway.metering.redis_buffer import RedisStreamBuffer
from gateway.redis.group_commit import PipelineBatcher
from tests.support.round_trips import RoundTrips
from tests.unit.limits.conftest import Clock, principal, usage_event


async def test_two_processes_share_one_window(fake_server: fakeredis.FakeServer, clock: Clock) -> None:
    first = RedisLimiter(FakeRedis(server=fake_server), clock)
    second = RedisLimiter(FakeRedis(server=fake_server), clock)
    who = principal(team_rpm=5)

    outcomes = []
    for limiter in [first, second] * 4:
        try:
            await limiter.admit(who, 0)
            outcomes.append("ok")
        except RateLimited:
            outcomes.append("429")

    assert outcomes == ["ok"] * 5 + ["429"] * 3


async def test_counters_are_named_per_month_and_expire(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.admit(principal(key_rpm=10), 0)
    await limiter.settle(principal(key_rpm=10), usage_event(clock, cost="0.25"), 0)

    assert await fake_redis.get("gw:spend:team:team_a:2026-11") == b"2500000000"
    assert await fake_redis.get("gw:spend:key:key_a:2026-11") == b"2500000000"
    assert 34 * 86_400 < await fake_redis.ttl("gw:spend:team:team_a:2026-11") <= 35 * 86_400
    assert 0 < await fake_redis.pttl("gw:rate:key:key_a:requests") <= 7_000  # full again after 6 s


async def test_the_spend_of_a_caller_no_limit_binds_is_written_in_bulk(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    for _ in range(3):
        await limiter.settle(principal(), usage_event(clock, cost="0.25"), 0)

    assert await fake_redis.get("gw:spend:team:team_a:2026-11") is None  # not one command a request
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")  # but counted
    await asyncio.sleep(DEFERRED_SPEND_S + 0.2)
    assert await fake_redis.get("gw:spend:team:team_a:2026-11") == b"7500000000"
    assert await fake_redis.get("gw:spend:key:key_a:2026-11") == b"7500000000"
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")


async def test_a_graceful_stop_writes_the_spend_held_back(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.settle(principal(), usage_event(clock, cost="0.25"), 0)

    await limiter.aclose()

    assert await fake_redis.get("gw:spend:key:key_a:2026-11") == b"2500000000"


async def test_spend_held_back_while_redis_is_down_is_written_once_it_is_back(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.settle(principal(), usage_event(clock, cost="0.25"), 0)
    fake_server.connected = False
    await limiter.aclose()  # the write fails: the spend waits in the process
    assert limiter.degraded
    fake_server.connected = True

    await limiter.settle(principal(key_rpm=10), usage_event(clock, cost="0.5"), 0)

    assert await fake_redis.get("gw:spend:team:team_a:2026-11") == b"7500000000"


async def test_windows_run_on_the_servers_clock_by_default(fake_redis: FakeRedis) -> None:
    limiter = RedisLimiter(fake_redis)
    who = principal(key_rpm=2)
    await limiter.admit(who, 0)
    await limiter.admit(who, 0)

    with pytest.raises(RateLimited):
        await limiter.admit(who, 0)


async def test_while_redis_is_down_limits_open_and_budgets_hold(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    who = principal(key_rpm=1, team_budget_usd=Decimal("0.01"))
    await limiter.settle(who, usage_event(clock, cost="0.006"), 0)
    await limiter.admit(who, 0)  # reads the spend: 0.006
    fake_server.connected = False

    with capture_logs() as logs:
        admitted = [await limiter.admit(who, 0) for _ in range(3)]  # rpm 1, yet let in
        await limiter.settle(who, usage_event(clock, cost="0.004"), 0)
        with pytest.raises(QuotaExceeded):
            await limiter.admit(who, 0)

    assert [a.headers for a in admitted] == [{}, {}, {}]
    assert [entry["event"] for entry in logs] == ["rate_limits_degraded"]
    assert limiter.degraded


async def test_spend_settled_during_an_outage_reaches_redis_once(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    other = RedisLimiter(FakeRedis(server=fake_server), clock)
    who = principal(key_rpm=100)  # a bound caller: its spend is settled at once, not held back
    fake_server.connected = False
    await limiter.settle(who, usage_event(clock, cost="0.5"), 0)
    await limiter.settle(who, usage_event(clock, cost="0.25"), 0)
    fake_server.connected = True

    await limiter.admit(who, 0)
    await limiter.admit(who, 0)

    assert await other.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")
    with pytest.raises(QuotaExceeded):
        await other.admit(principal(key_budget_usd=Decimal("0.75")), 0)
    assert not limiter.degraded


async def test_reconcile_on_a_cold_redis_restores_every_counter(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    big = 2**60  # beyond a double's exact integers: compared as strings in Lua

    await limiter.reconcile(MonthSpend("2026-11", teams={"team_a": big}, keys={"key_a": 10}))

    assert await fake_redis.get("gw:spend:team:team_a:2026-11") == str(big).encode()
    assert await fake_redis.ttl("gw:spend:key:key_a:2026-11") > 34 * 86_400
    with pytest.raises(QuotaExceeded):
        await limiter.admit(principal(team_budget_usd=Decimal(big).scaleb(-10)), 0)
    await limiter.admit(principal(team_budget_usd=Decimal(big + 1).scaleb(-10)), 0)


async def test_a_settle_is_queued_when_called_and_shares_the_usage_appends_round_trip(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    """As ProxyService._meter does it: settle called, usage appended, then the settle awaited."""
    batcher = PipelineBatcher(fake_redis)
    limiter = RedisLimiter(fake_redis, clock, batcher=batcher)
    buffer = RedisStreamBuffer(fake_redis, stream="usage", batcher=batcher)
    await buffer.append(usage_event(clock))  # connects, and takes the stream length check out of the way
    await fake_redis.script_load(_SETTLE)
    round_trips = RoundTrips(batcher)
    event = usage_event(clock, cost="0.25")
    settled = limiter.settle(principal(), event, 0)
    await buffer.append(event)
    await settled

    assert round_trips.count == 1
    assert await fake_redis.xlen("usage") == 2
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.25")
