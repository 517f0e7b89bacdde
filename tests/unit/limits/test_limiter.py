"""Limiter semantics, run against MemoryLimiter and RedisLimiter (fakeredis) alike."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from gateway.auth.principal import Principal
from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits import Limiter, MonthSpend
from tests.unit.limits.conftest import Clock, principal, usage_event


async def refusal(limiter: Limiter, who: object, tokens: int = 0) -> RateLimited:
    with pytest.raises(RateLimited) as raised:
        await limiter.admit(who, tokens)  # type: ignore[arg-type]
    return raised.value


async def test_the_request_after_rpm_is_refused_with_openai_headers(limiter: Limiter) -> None:
    who = principal(key_rpm=10)
    remaining = [(await limiter.admit(who, 0)).headers["x-ratelimit-remaining-requests"] for _ in range(10)]

    error = await refusal(limiter, who)

    assert remaining == [str(n) for n in range(9, -1, -1)]
    assert not isinstance(error, QuotaExceeded)
    assert (error.status, error.type, error.code) == (429, "rate_limit_error", "rate_limit_exceeded")
    assert error.headers["retry-after"] == "6"
    assert error.headers["retry-after-ms"] == "6000"
    assert error.headers["x-ratelimit-limit-requests"] == "10"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-reset-requests"] == "1m0s"


async def test_a_minute_refills_one_request_per_interval(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_rpm=10)
    for _ in range(10):
        await limiter.admit(who, 0)
    clock.advance(5.9)
    await refusal(limiter, who)
    clock.advance(0.1)
    admitted = await limiter.admit(who, 0)
    await refusal(limiter, who)
    clock.advance(60)

    for _ in range(10):
        await limiter.admit(who, 0)

    assert admitted.headers["x-ratelimit-remaining-requests"] == "0"
    await refusal(limiter, who)


async def test_a_refused_request_charges_no_window(limiter: Limiter) -> None:
    who = principal(key_rpm=5, team_rpm=2)
    await limiter.admit(who, 0)
    await limiter.admit(who, 0)
    for _ in range(3):
        error = await refusal(limiter, who)
    assert "team team_a" in error.message

    key_only = principal(key_rpm=5)
    headers = (await limiter.admit(key_only, 0)).headers
    assert headers["x-ratelimit-remaining-requests"] == "2"  # 2 admitted + this one of 5


async def test_headers_show_the_tightest_window_of_each_kind(limiter: Limiter) -> None:
    who = principal(key_rpm=100, team_rpm=3, key_tpm=1000, team_tpm=5000)

    headers = (await limiter.admit(who, 400)).headers

    assert headers == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "20s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "600",
        "x-ratelimit-reset-tokens": "24s",
    }


async def test_no_limits_no_headers(limiter: Limiter) -> None:
    assert (await limiter.admit(principal(), 10**9)).headers == {}


async def test_token_window_admits_until_the_estimate_no_longer_fits(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_tpm=1000)
    await limiter.admit(who, 600)
    await limiter.admit(who, 400)

    error = await refusal(limiter, who, 100)

    assert error.headers["x-ratelimit-remaining-tokens"] == "0"
    assert error.headers["retry-after-ms"] == "6000"  # 100 tokens refill in 6 s
    clock.advance(6)
    await limiter.admit(who, 100)


async def test_a_request_larger_than_the_window_is_told_not_to_retry(limiter: Limiter) -> None:
    error = await refusal(limiter, principal(key_tpm=1000), 1001)

    assert error.headers["x-should-retry"] == "false"
    assert "Request too large" in error.message


async def test_settle_refunds_an_overestimate(limiter: Limiter, clock: Clock) -> None:
    who = principal(key_tpm=1000)
    await limiter.admit(who, 900)
    await limiter.settle(who, usage_event(clock, prompt=60, completion=40), 900)

    admitted = await limiter.admit(who, 800)

    assert admitted.headers["x-ratelimit-remaining-tokens"] == "100"


async def test_settle_debits_an_underestimate(limiter: Limiter, clock: Clock) -> None:
    who = principal(key_tpm=1000)
    await limiter.admit(who, 100)
    await limiter.settle(who, usage_event(clock, prompt=500, completion=700), 100)  # 200 over

    error = await refusal(limiter, who, 1)

    assert error.headers["x-ratelimit-reset-tokens"] == "1m12s"
    assert error.headers["retry-after"] == "13"  # 201 tokens of debt at 60 ms each


async def test_release_gives_the_reservation_back(limiter: Limiter) -> None:
    who = principal(team_tpm=1000)
    await limiter.admit(who, 1000)
    await limiter.release(who, 1000)

    assert (await limiter.admit(who, 1000)).headers["x-ratelimit-remaining-tokens"] == "0"


@pytest.mark.parametrize(
    ("budget_field", "scope"), [("team_budget_usd", "team team_a"), ("key_budget_usd", "key key_a")]
)
async def test_budget_refuses_once_spend_reaches_it_exactly(
    limiter: Limiter, clock: Clock, budget_field: str, scope: str
) -> None:
    who = principal(**{budget_field: Decimal("0.001")})
    await limiter.settle(who, usage_event(clock, cost="0.0005"), 0)
    await limiter.settle(who, usage_event(clock, cost="0.0004999999"), 0)
    await limiter.admit(who, 0)  # 1e-10 USD (the records' scale) short of the budget
    await limiter.settle(who, usage_event(clock, cost="0.0000000001"), 0)

    with pytest.raises(QuotaExceeded) as raised:
        await limiter.admit(who, 0)

    error = raised.value
    assert (error.status, error.type, error.code) == (429, "insufficient_quota", "insufficient_quota")
    assert scope in error.message
    assert error.headers["x-should-retry"] == "false"
    assert int(error.headers["retry-after"]) == 28 * 86_400  # until 2026-12-01T00:00Z


async def test_budget_refusal_charges_no_window(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_budget_usd=Decimal(0), key_rpm=1)
    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, 0)
    assert (await limiter.admit(principal(key_rpm=1), 0)).headers["x-ratelimit-remaining-requests"] == "0"


async def test_a_new_month_starts_from_zero(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_budget_usd=Decimal(1))
    await limiter.settle(who, usage_event(clock, cost="1"), 0)
    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, 0)

    clock.advance(28 * 86_400)  # 2026-12-01

    await limiter.admit(who, 0)
    assert await limiter.spent_usd("team", "team_a", "2026-12") == 0


async def test_spend_is_the_exact_sum_of_the_costs(limiter: Limiter, clock: Clock) -> None:
    who = principal()
    costs = [Decimal("0.0000001234") * i + Decimal("0.000000000" + str(i % 10)) for i in range(1, 501)]
    for cost in costs:
        await limiter.settle(who, usage_event(clock, cost=str(cost)), 0)

    assert await limiter.spent_usd("team", "team_a", "2026-11") == sum(costs)
    assert await limiter.spent_usd("key", "key_a", "2026-11") == sum(costs)
    assert await limiter.spent_usd("team", "team_b", "2026-11") == 0


async def test_reconcile_raises_counters_but_never_lowers_them(limiter: Limiter, clock: Clock) -> None:
    await limiter.settle(principal(), usage_event(clock, cost="5"), 0)

    await limiter.reconcile(
        MonthSpend("2026-11", teams={"team_a": 3 * 10**10, "team_b": 7 * 10**10}, keys={"key_b": 1})
    )

    assert await limiter.spent_usd("team", "team_a", "2026-11") == 5
    assert await limiter.spent_usd("team", "team_b", "2026-11") == 7
    assert await limiter.spent_usd("key", "key_b", "2026-11") == Decimal("1E-10")
    team_b = Principal(key_id="key_b", key_prefix="p", team_id="team_b", team_name="b")
    with pytest.raises(QuotaExceeded):
        await limiter.admit(replace(team_b, team_budget_usd=Decimal(7)), 0)
    await limiter.admit(replace(team_b, team_budget_usd=Decimal("7.0000000001")), 0)


async def test_costs_finer_than_the_records_round_as_the_records_do(limiter: Limiter, clock: Clock) -> None:
    await limiter.settle(principal(), usage_event(clock, cost="0.00000000005"), 0)  # half a unit: up
    await limiter.settle(principal(), usage_event(clock, cost="0.00000000004"), 0)  # less: down

    assert await limiter.spent_usd("key", "key_a", "2026-11") == Decimal("1E-10")
