"""RedisLimiter specifics on fakeredis: shared state, key layout, Redis's clock, outages."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from decimal import Decimal

import fakeredis
import pytest
from fakeredis.aioredis import FakeRedis
from structlog.testing import capture_logs

from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits import Admission, MonthSpend, RedisLimiter, Reservation
from gateway.limits.redis.limiter import DEFERRED_SPEND_S
from gateway.limits.redis.scripts import SETTLE
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.redis.group_commit import PipelineBatcher
from tests.support.round_trips import RoundTrips
from tests.unit.limits.conftest import Clock, Records, principal, tokens, usage_event, usd

# The counters of key_a and its team: one hash tag (the team's), so one Cluster slot.
TEAM_SPEND = "gw:{team:team_a}:spend:team:team_a:2026-11"
KEY_SPEND = "gw:{team:team_a}:spend:key:key_a:2026-11"
KEY_REQUESTS = "gw:{team:team_a}:rate:key:key_a:requests"


async def test_two_processes_share_one_window(fake_server: fakeredis.FakeServer, clock: Clock) -> None:
    first = RedisLimiter(FakeRedis(server=fake_server), clock)
    second = RedisLimiter(FakeRedis(server=fake_server), clock)
    who = principal(team_rpm=5)

    outcomes = []
    for limiter in [first, second] * 4:
        try:
            await limiter.admit(who, tokens(0))
            outcomes.append("ok")
        except RateLimited:
            outcomes.append("429")

    assert outcomes == ["ok"] * 5 + ["429"] * 3


async def test_counters_are_named_per_month_and_expire(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.admit(principal(key_rpm=10), tokens(0))
    await limiter.settle(principal(key_rpm=10), usage_event(clock, cost="0.25"), None)

    assert await fake_redis.get(TEAM_SPEND) == b"2500000000"
    assert await fake_redis.get(KEY_SPEND) == b"2500000000"
    assert 34 * 86_400 < await fake_redis.ttl(TEAM_SPEND) <= 35 * 86_400
    assert 0 < await fake_redis.pttl(KEY_REQUESTS) <= 7_000  # full again after 6 s


async def test_the_spend_of_a_caller_no_limit_binds_is_written_in_bulk(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    for _ in range(3):
        await limiter.settle(principal(), usage_event(clock, cost="0.25"), None)

    assert await fake_redis.get(TEAM_SPEND) is None  # not one command a request
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")  # but counted
    await asyncio.sleep(DEFERRED_SPEND_S + 0.2)
    assert await fake_redis.get(TEAM_SPEND) == b"7500000000"
    assert await fake_redis.get(KEY_SPEND) == b"7500000000"
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")


async def test_a_graceful_stop_writes_the_spend_held_back(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.settle(principal(), usage_event(clock, cost="0.25"), None)

    await limiter.aclose()

    assert await fake_redis.get(KEY_SPEND) == b"2500000000"


async def test_spend_held_back_while_redis_is_down_is_written_once_it_is_back(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    await limiter.settle(principal(), usage_event(clock, cost="0.25"), None)
    fake_server.connected = False
    await limiter.aclose()  # the write fails: the spend waits in the process
    assert limiter.degraded
    fake_server.connected = True

    await limiter.settle(principal(key_rpm=10), usage_event(clock, cost="0.5"), None)

    assert await fake_redis.get(TEAM_SPEND) == b"7500000000"


async def test_windows_run_on_the_servers_clock_by_default(fake_redis: FakeRedis) -> None:
    limiter = RedisLimiter(fake_redis)
    who = principal(key_rpm=2)
    await limiter.admit(who, tokens(0))
    await limiter.admit(who, tokens(0))

    with pytest.raises(RateLimited):
        await limiter.admit(who, tokens(0))


async def test_while_redis_is_down_limits_open_and_budgets_hold(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    who = principal(key_rpm=1, team_budget_usd=Decimal("0.01"))
    await limiter.settle(who, usage_event(clock, cost="0.006"), None)
    await limiter.admit(who, tokens(0))  # reads the spend: 0.006
    fake_server.connected = False

    with capture_logs() as logs:
        admitted = [await limiter.admit(who, tokens(0)) for _ in range(3)]  # rpm 1, yet let in
        await limiter.settle(who, usage_event(clock, cost="0.004"), None)
        with pytest.raises(QuotaExceeded):
            await limiter.admit(who, tokens(0))

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
    await limiter.settle(who, usage_event(clock, cost="0.5"), None)
    await limiter.settle(who, usage_event(clock, cost="0.25"), None)
    fake_server.connected = True

    await limiter.admit(who, tokens(0))
    await limiter.admit(who, tokens(0))

    assert await other.spent_usd("team", "team_a", "2026-11") == Decimal("0.75")
    with pytest.raises(QuotaExceeded):
        await other.admit(principal(key_budget_usd=Decimal("0.75")), tokens(0))
    assert not limiter.degraded


async def test_reconcile_on_a_cold_redis_restores_every_counter(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    big = 2**60  # stored as the records say, digit for digit
    exact = 2**53 - 1  # the largest spend the scripts compare to the unit (about 900,000 USD)

    await limiter.reconcile(
        MonthSpend("2026-11", teams={"team_a": big, "team_b": exact}, keys={("team_a", "key_a"): 10})
    )

    assert await fake_redis.get(TEAM_SPEND) == str(big).encode()
    assert await fake_redis.ttl(KEY_SPEND) > 34 * 86_400
    with pytest.raises(QuotaExceeded):
        await limiter.admit(principal(team_budget_usd=Decimal(big).scaleb(-10)), tokens(0))
    team_b = replace(principal(), team_id="team_b")
    with pytest.raises(QuotaExceeded):
        await limiter.admit(replace(team_b, team_budget_usd=Decimal(exact).scaleb(-10)), tokens(0))
    await limiter.admit(replace(team_b, team_budget_usd=Decimal(exact + 1).scaleb(-10)), tokens(0))


async def test_a_settle_is_queued_when_called_and_shares_the_usage_appends_round_trip(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    """As ProxyService._meter does it: settle called, usage appended, then the settle awaited."""
    batcher = PipelineBatcher(fake_redis)
    limiter = RedisLimiter(fake_redis, clock, batcher=batcher)
    buffer = RedisStreamBuffer(fake_redis, stream="usage", batcher=batcher)
    await buffer.append(usage_event(clock))  # connects, and takes the stream length check out of the way
    await fake_redis.script_load(SETTLE)
    round_trips = RoundTrips(batcher)
    event = usage_event(clock, cost="0.25")
    settled = limiter.settle(principal(), event, None)
    await buffer.append(event)
    await settled

    assert round_trips.count == 1
    assert await fake_redis.xlen("usage") == 2
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.25")


async def test_a_hold_is_a_member_of_the_counters_holds_until_its_settle(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock, hold_ttl_s=600)
    who = principal(team_budget_usd=Decimal(1))
    admission = await limiter.admit(who, Reservation(tokens=10, units=250))
    assert admission.hold is not None

    assert await fake_redis.get(TEAM_SPEND + ":held") == b"250"
    members = await fake_redis.zrange(TEAM_SPEND + ":holds", 0, -1, withscores=True)
    assert members == [(f"250:{admission.hold.id}".encode(), (clock.now + 600) * 1e6)]
    assert await fake_redis.exists(KEY_SPEND + ":held") == 0  # the key has no budget

    await limiter.settle(who, usage_event(clock, cost="0.00000001"), admission)

    assert await fake_redis.get(TEAM_SPEND + ":held") == b"0"
    assert await fake_redis.zcard(TEAM_SPEND + ":holds") == 0
    assert await fake_redis.get(TEAM_SPEND) == b"100"


async def test_settles_sharing_a_round_trip_each_end_their_hold(fake_redis: FakeRedis, clock: Clock) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    who = principal(key_budget_usd=Decimal(1), key_tpm=10_000)
    admitted = [await limiter.admit(who, Reservation(tokens=100, units=10**8)) for _ in range(20)]

    await asyncio.gather(*(limiter.settle(who, usage_event(clock, prompt=10), a) for a in admitted))

    assert await fake_redis.get(KEY_SPEND + ":held") == b"0"
    headers = (await limiter.admit(who, Reservation(tokens=0))).headers
    assert headers["x-ratelimit-remaining-tokens"] == "9800"  # 20 x 10 tokens used


async def test_an_emptied_redis_rebuilds_the_spend_from_the_records_before_deciding(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    budget = Decimal("0.10")
    records = Records()
    limiter = RedisLimiter(fake_redis, clock, records=records)
    who = principal(team_budget_usd=budget)
    for _ in range(9):  # nine cents spent, and recorded
        admission = await limiter.admit(who, usd("0.01"))
        await limiter.settle(who, usage_event(clock, cost="0.01"), admission)
    records.units[("team", "team_a")] = 9 * 10**8
    assert records.queries == 1  # the first admission's, on a counter never seeded

    await fake_redis.flushdb()
    another = await limiter.admit(who, usd("0.01"))  # the tenth cent: still fits

    assert records.queries == 2
    await limiter.settle(who, usage_event(clock, cost="0.01"), another)
    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, usd("0.01"))


async def test_a_settle_into_an_emptied_redis_does_not_make_its_counter_trusted(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    records = Records({("team", "team_a"): 10**9})  # the whole 0.10 spent
    limiter = RedisLimiter(fake_redis, clock, records=records)
    who = principal(team_budget_usd=Decimal("0.10"))
    await fake_redis.flushdb()
    await limiter.settle(who, usage_event(clock, cost="0.001"), None)  # a request in flight ends

    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, usd("0.001"))

    assert records.queries == 1
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.10")


async def test_a_negative_counter_left_in_redis_is_compared_as_a_number(
    fake_redis: FakeRedis, clock: Clock
) -> None:
    await fake_redis.set(TEAM_SPEND, -50_000_000_000)  # -5 USD
    limiter = RedisLimiter(fake_redis, clock)
    who = principal(team_budget_usd=Decimal("0.001"))

    admitted = [await limiter.admit(who, usd("0.0005")) for _ in range(2)]  # counted as 0, not -5 USD

    with pytest.raises(RateLimited):
        await limiter.admit(who, usd("0.0005"))
    for admission in admitted:
        await limiter.settle(who, usage_event(clock, cost="-1"), admission)  # clamped: no effect
    assert await fake_redis.get(TEAM_SPEND) == b"-50000000000"
    await limiter.admit(who, usd("0.001"))


async def test_while_redis_is_down_a_process_still_holds_its_reservations(
    fake_server: fakeredis.FakeServer, fake_redis: FakeRedis, clock: Clock
) -> None:
    limiter = RedisLimiter(fake_redis, clock)
    who = principal(team_budget_usd=Decimal("0.10"))
    fake_server.connected = False

    outcomes = await asyncio.gather(
        *(limiter.admit(who, usd("0.01")) for _ in range(20)), return_exceptions=True
    )

    admitted = [o for o in outcomes if isinstance(o, Admission)]
    assert len(admitted) == 10
    assert all(a.hold is not None and a.hold.local for a in admitted)
    for admission in admitted:
        await limiter.release(who, admission)
    await limiter.admit(who, usd("0.1"))
