"""Limiter semantics, run against MemoryLimiter and RedisLimiter (fakeredis) alike."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from decimal import Decimal

import pytest

from gateway.auth.principal import Principal
from gateway.errors import QuotaExceeded, RateLimited, ServiceUnavailable
from gateway.limits import Admission, Limiter, MonthSpend, Reservation
from tests.unit.limits.conftest import Clock, LimiterFactory, Records, principal, tokens, usage_event, usd


async def refusal(limiter: Limiter, who: Principal, count: int = 0) -> RateLimited:
    with pytest.raises(RateLimited) as raised:
        await limiter.admit(who, tokens(count))
    return raised.value


async def test_the_request_after_rpm_is_refused_with_openai_headers(limiter: Limiter) -> None:
    who = principal(key_rpm=10)
    remaining = [
        (await limiter.admit(who, tokens(0))).headers["x-ratelimit-remaining-requests"] for _ in range(10)
    ]

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
        await limiter.admit(who, tokens(0))
    clock.advance(5.9)
    await refusal(limiter, who)
    clock.advance(0.1)
    admitted = await limiter.admit(who, tokens(0))
    await refusal(limiter, who)
    clock.advance(60)

    for _ in range(10):
        await limiter.admit(who, tokens(0))

    assert admitted.headers["x-ratelimit-remaining-requests"] == "0"
    await refusal(limiter, who)


async def test_a_refused_request_charges_no_window(limiter: Limiter) -> None:
    who = principal(key_rpm=5, team_rpm=2)
    await limiter.admit(who, tokens(0))
    await limiter.admit(who, tokens(0))
    for _ in range(3):
        error = await refusal(limiter, who)
    assert "team team_a" in error.message

    key_only = principal(key_rpm=5)
    headers = (await limiter.admit(key_only, tokens(0))).headers
    assert headers["x-ratelimit-remaining-requests"] == "2"  # 2 admitted + this one of 5


async def test_headers_show_the_tightest_window_of_each_kind(limiter: Limiter) -> None:
    who = principal(key_rpm=100, team_rpm=3, key_tpm=1000, team_tpm=5000)

    headers = (await limiter.admit(who, tokens(400))).headers

    assert headers == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "20s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "600",
        "x-ratelimit-reset-tokens": "24s",
    }


async def test_no_limits_no_headers(limiter: Limiter) -> None:
    assert (await limiter.admit(principal(), tokens(10**9))).headers == {}


async def test_token_window_admits_until_the_estimate_no_longer_fits(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_tpm=1000)
    await limiter.admit(who, tokens(600))
    await limiter.admit(who, tokens(400))

    error = await refusal(limiter, who, 100)

    assert error.headers["x-ratelimit-remaining-tokens"] == "0"
    assert error.headers["retry-after-ms"] == "6000"  # 100 tokens refill in 6 s
    clock.advance(6)
    await limiter.admit(who, tokens(100))


async def test_a_request_larger_than_the_window_is_told_not_to_retry(limiter: Limiter) -> None:
    error = await refusal(limiter, principal(key_tpm=1000), 1001)

    assert error.headers["x-should-retry"] == "false"
    assert "Request too large" in error.message


async def test_settle_refunds_an_overestimate(limiter: Limiter, clock: Clock) -> None:
    who = principal(key_tpm=1000)
    admission = await limiter.admit(who, tokens(900))
    await limiter.settle(who, usage_event(clock, prompt=60, completion=40), admission)

    admitted = await limiter.admit(who, tokens(800))

    assert admitted.headers["x-ratelimit-remaining-tokens"] == "100"


async def test_settle_debits_an_underestimate(limiter: Limiter, clock: Clock) -> None:
    who = principal(key_tpm=1000)
    admission = await limiter.admit(who, tokens(100))
    await limiter.settle(who, usage_event(clock, prompt=500, completion=700), admission)  # 200 over

    error = await refusal(limiter, who, 1)

    assert error.headers["x-ratelimit-reset-tokens"] == "1m12s"
    assert error.headers["retry-after"] == "13"  # 201 tokens of debt at 60 ms each


async def test_release_gives_the_reservation_back(limiter: Limiter) -> None:
    who = principal(team_tpm=1000)
    admission = await limiter.admit(who, tokens(1000))
    await limiter.release(who, admission)

    assert (await limiter.admit(who, tokens(1000))).headers["x-ratelimit-remaining-tokens"] == "0"


@pytest.mark.parametrize(
    ("budget_field", "scope"), [("team_budget_usd", "team team_a"), ("key_budget_usd", "key key_a")]
)
async def test_budget_refuses_once_spend_reaches_it_exactly(
    limiter: Limiter, clock: Clock, budget_field: str, scope: str
) -> None:
    who = principal(**{budget_field: Decimal("0.001")})
    await limiter.settle(who, usage_event(clock, cost="0.0005"), None)
    await limiter.settle(who, usage_event(clock, cost="0.0004999999"), None)
    await limiter.admit(who, tokens(0))  # 1e-10 USD (the records' scale) short of the budget
    await limiter.settle(who, usage_event(clock, cost="0.0000000001"), None)

    with pytest.raises(QuotaExceeded) as raised:
        await limiter.admit(who, tokens(0))

    error = raised.value
    assert (error.status, error.type, error.code) == (429, "insufficient_quota", "insufficient_quota")
    assert scope in error.message
    assert error.headers["x-should-retry"] == "false"
    assert int(error.headers["retry-after"]) == 28 * 86_400  # until 2026-12-01T00:00Z


async def test_budget_refusal_charges_no_window(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_budget_usd=Decimal(0), key_rpm=1)
    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, tokens(0))
    assert (await limiter.admit(principal(key_rpm=1), tokens(0))).headers[
        "x-ratelimit-remaining-requests"
    ] == "0"


async def test_a_new_month_starts_from_zero(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_budget_usd=Decimal(1))
    await limiter.settle(who, usage_event(clock, cost="1"), None)
    with pytest.raises(QuotaExceeded):
        await limiter.admit(who, tokens(0))

    clock.advance(28 * 86_400)  # 2026-12-01

    await limiter.admit(who, tokens(0))
    assert await limiter.spent_usd("team", "team_a", "2026-12") == 0


async def test_spend_is_the_exact_sum_of_the_costs(limiter: Limiter, clock: Clock) -> None:
    who = principal()
    costs = [Decimal("0.0000001234") * i + Decimal("0.000000000" + str(i % 10)) for i in range(1, 501)]
    for cost in costs:
        await limiter.settle(who, usage_event(clock, cost=str(cost)), None)

    assert await limiter.spent_usd("team", "team_a", "2026-11") == sum(costs)
    assert await limiter.spent_usd("key", "key_a", "2026-11", "team_a") == sum(costs)
    assert await limiter.spent_usd("team", "team_b", "2026-11") == 0


async def test_reconcile_raises_counters_but_never_lowers_them(limiter: Limiter, clock: Clock) -> None:
    await limiter.settle(principal(), usage_event(clock, cost="5"), None)

    await limiter.reconcile(
        MonthSpend(
            "2026-11", teams={"team_a": 3 * 10**10, "team_b": 7 * 10**10}, keys={("team_b", "key_b"): 1}
        )
    )

    assert await limiter.spent_usd("team", "team_a", "2026-11") == 5
    assert await limiter.spent_usd("team", "team_b", "2026-11") == 7
    assert await limiter.spent_usd("key", "key_b", "2026-11", "team_b") == Decimal("1E-10")
    team_b = Principal(key_id="key_b", key_prefix="p", team_id="team_b", team_name="b")
    with pytest.raises(QuotaExceeded):
        await limiter.admit(replace(team_b, team_budget_usd=Decimal(7)), tokens(0))
    await limiter.admit(replace(team_b, team_budget_usd=Decimal("7.0000000001")), tokens(0))


async def test_costs_finer_than_the_records_round_as_the_records_do(limiter: Limiter, clock: Clock) -> None:
    await limiter.settle(principal(), usage_event(clock, cost="0.00000000005"), None)  # half a unit: up
    await limiter.settle(principal(), usage_event(clock, cost="0.00000000004"), None)  # less: down

    assert await limiter.spent_usd("key", "key_a", "2026-11", "team_a") == Decimal("1E-10")


# --- reservations against budgets ---------------------------------------------------------------

TEN_CENTS = Decimal("0.10")  # a budget for ten requests reserving a cent each


async def admit_or_refuse(
    limiter: Limiter, who: Principal, reservation: Reservation
) -> Admission | RateLimited:
    try:
        return await limiter.admit(who, reservation)
    except RateLimited as exc:
        return exc


async def test_200_concurrent_admissions_against_a_budget_for_10_admit_10(limiter: Limiter) -> None:
    who = principal(team_budget_usd=TEN_CENTS)

    outcomes = await asyncio.gather(*(admit_or_refuse(limiter, who, usd("0.01")) for _ in range(200)))

    admitted = [o for o in outcomes if isinstance(o, Admission)]
    refused = [o for o in outcomes if isinstance(o, RateLimited)]
    assert (len(admitted), len(refused)) == (10, 190)
    # Held, not spent: retrying shortly may succeed, so this is no insufficient_quota
    assert not any(isinstance(r, QuotaExceeded) for r in refused)
    assert {r.headers["retry-after"] for r in refused} == {"1"}
    assert "reserved by requests in flight" in refused[0].message


async def test_a_settle_replaces_the_hold_by_the_real_cost(limiter: Limiter, clock: Clock) -> None:
    who = principal(key_budget_usd=TEN_CENTS)
    admitted = [await limiter.admit(who, usd("0.01")) for _ in range(10)]
    await refusal_of(limiter, who, usd("0.01"))

    for admission in admitted:
        await limiter.settle(who, usage_event(clock, cost="0.004"), admission)

    assert await limiter.spent_usd("key", "key_a", "2026-11", "team_a") == Decimal("0.04")
    for _ in range(6):  # 0.06 left
        await limiter.admit(who, usd("0.01"))
    await refusal_of(limiter, who, usd("0.01"))


async def test_a_request_that_could_cost_more_than_is_left_is_insufficient_quota(
    limiter: Limiter, clock: Clock
) -> None:
    who = principal(team_budget_usd=TEN_CENTS)
    await limiter.settle(who, usage_event(clock, cost="0.095"), None)

    with pytest.raises(QuotaExceeded) as raised:
        await limiter.admit(who, usd("0.01"))

    assert "more than the 0.005 USD left" in raised.value.message
    assert "Lower max_tokens" in raised.value.message
    assert raised.value.headers["x-should-retry"] == "false"
    await limiter.admit(who, usd("0.005"))  # exactly what is left fits


async def test_release_ends_the_hold(limiter: Limiter) -> None:
    who = principal(team_budget_usd=TEN_CENTS)
    admitted = [await limiter.admit(who, usd("0.01")) for _ in range(10)]

    for admission in admitted:
        await limiter.release(who, admission)
        await limiter.release(who, admission)  # twice: the second one finds nothing to end

    for _ in range(10):
        await limiter.admit(who, usd("0.01"))
    assert await limiter.spent_usd("team", "team_a", "2026-11") == 0


async def test_a_hold_never_settled_expires(make_limiter: LimiterFactory, clock: Clock) -> None:
    limiter = make_limiter(hold_ttl_s=60)
    who = principal(team_budget_usd=TEN_CENTS)
    await limiter.admit(who, usd("0.1"))  # its request is lost: no settle, no release
    await refusal_of(limiter, who, usd("0.01"))

    clock.advance(61)

    await limiter.admit(who, usd("0.1"))


async def test_the_key_and_team_budgets_each_hold(limiter: Limiter) -> None:
    first = principal(key_budget_usd=Decimal("0.03"), team_budget_usd=Decimal("0.05"))
    second = replace(first, key_id="key_b", key_budget_usd=None)
    for _ in range(3):
        await limiter.admit(first, usd("0.01"))
    error = await refusal_of(limiter, first, usd("0.01"))
    assert "key key_a" in error.message
    await limiter.admit(second, usd("0.01"))
    await limiter.admit(second, usd("0.01"))

    error = await refusal_of(limiter, second, usd("0.01"))

    assert "team team_a" in error.message


async def refusal_of(limiter: Limiter, who: Principal, reservation: Reservation) -> RateLimited:
    with pytest.raises(RateLimited) as raised:
        await limiter.admit(who, reservation)
    return raised.value


async def test_200_concurrent_admissions_against_a_token_limit_admit_what_it_holds(limiter: Limiter) -> None:
    who = principal(team_tpm=1000)

    outcomes = await asyncio.gather(*(admit_or_refuse(limiter, who, tokens(100)) for _ in range(200)))

    assert sum(isinstance(o, Admission) for o in outcomes) == 10


# --- usage that cannot be true ------------------------------------------------------------------


async def test_a_negative_settle_neither_raises_nor_unlocks_nor_locks_the_budget(
    limiter: Limiter, clock: Clock
) -> None:
    who = principal(team_budget_usd=TEN_CENTS, team_tpm=1000)
    admission = await limiter.admit(who, usd("0.01", 100))

    await limiter.settle(who, usage_event(clock, prompt=-500, completion=-30, cost="-5"), admission)

    assert await limiter.spent_usd("team", "team_a", "2026-11") == 0
    for _ in range(10):  # the whole budget, once, and no more
        await limiter.admit(who, usd("0.01", 10))
    await refusal_of(limiter, who, usd("0.01"))


async def test_an_absurd_count_refuses_the_token_window_for_two_minutes_at_most(
    limiter: Limiter, clock: Clock
) -> None:
    who = principal(key_tpm=1000)
    admission = await limiter.admit(who, tokens(10))
    await limiter.settle(who, usage_event(clock, prompt=3_000_000_000), admission)
    await refusal(limiter, who, 1)

    clock.advance(120)

    await limiter.admit(who, tokens(1000))


async def test_an_absurd_cost_is_counted_as_a_million_usd_at_most(limiter: Limiter, clock: Clock) -> None:
    who = principal(team_budget_usd=Decimal(10**12))
    for _ in range(2):
        await limiter.settle(who, usage_event(clock, cost="1e30"), None)

    assert await limiter.spent_usd("team", "team_a", "2026-11") == 2 * 10**6
    await limiter.admit(who, usd("1"))


# --- counters rebuilt from the records ----------------------------------------------------------


async def test_an_unseeded_counter_is_rebuilt_from_the_records_once_before_the_decision(
    make_limiter: LimiterFactory,
) -> None:
    records = Records({("team", "team_a"): 95 * 10**7}, delay_s=0.01)  # 0.095 of 0.10 spent
    limiter = make_limiter(records=records)
    who = principal(team_budget_usd=TEN_CENTS)

    outcomes = await asyncio.gather(*(admit_or_refuse(limiter, who, usd("0.001")) for _ in range(50)))

    assert records.queries == 1  # fifty admissions, one query
    assert sum(isinstance(o, Admission) for o in outcomes) == 5
    assert await limiter.spent_usd("team", "team_a", "2026-11") == Decimal("0.095")
    await refusal_of(limiter, who, usd("0.001"))
    assert records.queries == 1  # seeded now: trusted


async def test_a_counter_that_cannot_be_rebuilt_refuses_with_503(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(records=Records(down=True))
    who = principal(team_budget_usd=TEN_CENTS)

    with pytest.raises(ServiceUnavailable) as raised:
        await limiter.admit(who, usd("0.001"))

    assert raised.value.status == 503
    await limiter.admit(principal(team_rpm=10), tokens(0))  # no budget: nothing to rebuild
