"""Rate limits and budgets hold exactly across two `gateway serve` processes sharing Redis, under
concurrency and after Redis comes back empty.

Its own stack: two gateways on one PostgreSQL database and a Redis db of their own, in front of one mock
upstream, so the processes must agree through Redis alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest
import redis

from gateway.limits.spend import month_of, spend_key, to_units
from tests.e2e.conftest import ADMIN_KEY, CONFIG, MAX_BODY
from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import redis_url
from tests.support.upstream import start_mock_upstream

pytestmark = pytest.mark.e2e
REDIS_URL = redis_url("e2e-limits")
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "Say something about limits"}]}


@dataclass
class Pair:
    gateways: list[GatewayProcess]
    admin: httpx.Client

    def client(self, i: int, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateways[i % 2].base_url + "/v1", api_key=key, max_retries=0)

    def new_team(self, name: str, **fields: object) -> Team:
        return create_team(self.admin, name, **fields)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_url = recreate_database(f"gateway_e2e_limits_{os.getpid()}")
    upstream = start_mock_upstream()
    config: Path = tmp_path_factory.mktemp("limits") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, dead_port=free_port(), max_body=MAX_BODY))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }
    gateways = [GatewayProcess(config, env).start()]
    gateways.append(GatewayProcess(config, env).start())  # after the first migrated the database
    admin = httpx.Client(base_url=gateways[0].base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield Pair(gateways, admin)
    finally:
        admin.close()
        for gateway in gateways:
            gateway.stop()
        upstream.stop()
        redis.Redis.from_url(REDIS_URL).flushdb()


@dataclass(frozen=True)
class Served:
    headers: dict[str, str]


def call(pair: Pair, i: int, key: str) -> Served | openai.RateLimitError:
    """One chat completion through gateway i % 2: its response headers, or the 429 the SDK raised."""
    try:
        raw = pair.client(i, key).chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
    except openai.RateLimitError as exc:
        return exc
    return Served(dict(raw.headers))


def test_team_rpm_admits_exactly_rpm_requests_across_two_processes(pair: Pair) -> None:
    team = pair.new_team("limited-rpm", rpm_limit=5)  # one more request every 12 s

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(lambda i: call(pair, i, team.key), range(16)))

    served = [o for o in outcomes if isinstance(o, Served)]
    refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    assert (len(served), len(refused)) == (5, 11)
    assert {r.headers["x-ratelimit-limit-requests"] for r in served} == {"5"}
    assert sorted(r.headers["x-ratelimit-remaining-requests"] for r in served) == [str(n) for n in range(5)]
    for error in refused:
        headers = error.response.headers
        assert error.code == "rate_limit_exceeded"
        assert 1 <= int(headers["retry-after"]) <= 12
        assert headers["x-ratelimit-limit-requests"] == "5"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"].endswith("s")


def test_a_request_that_could_cost_more_than_the_budget_is_insufficient_quota_on_every_process(
    pair: Pair,
) -> None:
    team = pair.new_team("tiny-budget", monthly_budget_usd="0.000001")

    refused = [call(pair, i, team.key) for i in range(2)]

    for error in refused:
        assert isinstance(error, openai.RateLimitError)
        assert error.code == "insufficient_quota"
        assert error.body["type"] == "insufficient_quota"  # type: ignore[index]
        assert "Lower max_tokens" in error.message
        assert error.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.RateLimitError):
        pair.client(0, team.key).chat.completions.create(**CHAT)  # type: ignore[call-overload]


def spend_of(pair: Pair, team_id: str, requests: int) -> Decimal:
    """The team's recorded cost once `requests` records are written (polled: they are written in bulk)."""
    for _ in range(150):
        rows = pair.admin.get("/admin/usage", params={"team_id": team_id, "group_by": "team"}).json()["data"]
        if rows and rows[0]["requests"] >= requests:
            return Decimal(rows[0]["cost"])
        time.sleep(0.2)
    raise AssertionError(f"{requests} records of {team_id} were not written in time: {rows}")


SMALL = CHAT | {"max_tokens": 16}  # reserves ~40 tokens; the mock answers 16
SLOW = SMALL | {"extra_body": {"mock": {"latency_ms": 500}}}  # in flight together when sent together


def test_forty_concurrent_requests_never_spend_past_a_budget(pair: Pair) -> None:
    budget = Decimal("0.0002")  # five or six requests' reservations, seven of their real costs
    team = pair.new_team("budget-crowd", monthly_budget_usd=str(budget))

    def one(i: int) -> bool:
        try:
            pair.client(i, team.key).chat.completions.create(**SLOW)  # type: ignore[call-overload]
        except openai.RateLimitError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=40) as pool:
        served = sum(pool.map(one, range(40)))

    assert 1 <= served <= 7
    assert spend_of(pair, team.id, served) <= budget


def test_a_null_max_completion_tokens_leaves_max_tokens_to_count(pair: Pair) -> None:
    team = pair.new_team("null-cap", tpm_limit=1000)
    # Each waits a second upstream, so that all twelve are in flight together
    body = CHAT | {
        "max_tokens": 900,
        "max_completion_tokens": None,
        "extra_body": {"mock": {"latency_ms": 1000}},
    }

    def one(i: int) -> Served | openai.RateLimitError:
        try:
            raw = pair.client(i, team.key).chat.completions.with_raw_response.create(**body)  # type: ignore[call-overload]
        except openai.RateLimitError as exc:
            return exc
        return Served(dict(raw.headers))

    with ThreadPoolExecutor(max_workers=12) as pool:
        outcomes = list(pool.map(one, range(12)))

    served = [o for o in outcomes if isinstance(o, Served)]
    assert len(served) == 1  # each reserves its 900 tokens, and one minute holds 1000
    assert int(served[0].headers["x-ratelimit-remaining-tokens"]) < 100


def test_without_max_tokens_the_default_is_reserved(pair: Pair) -> None:
    team = pair.new_team("default-cap", tpm_limit=1000)

    refused = call(pair, 0, team.key)  # 4096 output tokens by default: more than a minute holds
    served = pair.client(1, team.key).chat.completions.create(**SMALL)  # type: ignore[call-overload]

    assert isinstance(refused, openai.RateLimitError)
    assert "Request too large" in refused.message
    assert served.usage is not None and served.usage.completion_tokens == 16


@pytest.mark.parametrize("fields", [{"max_tokens": -1}, {"max_completion_tokens": 2**31}, {"n": 0}])
def test_output_limits_out_of_range_are_400(pair: Pair, fields: dict[str, int]) -> None:
    team = pair.new_team(f"bad-cap-{next(iter(fields))}")

    with pytest.raises(openai.BadRequestError) as raised:
        pair.client(0, team.key).chat.completions.create(**CHAT | fields)  # type: ignore[call-overload]

    assert raised.value.param == next(iter(fields))


def test_the_spend_counter_equals_the_records(pair: Pair) -> None:
    team = pair.new_team("counted", monthly_budget_usd="100")
    for i in range(6):
        assert isinstance(call(pair, i, team.key), Served)

    cost = Decimal(0)
    for _ in range(150):  # records are written in bulk, shortly after the responses
        rows = pair.admin.get("/admin/usage", params={"team_id": team.id, "group_by": "team"}).json()["data"]
        if rows and rows[0]["requests"] == 6:
            cost = Decimal(rows[0]["cost"])
            break
        time.sleep(0.2)
    counter = redis.Redis.from_url(REDIS_URL).get(spend_key("team", team.id, month_of(time.time())))

    assert cost > 0
    assert int(counter or 0) == to_units(cost)


def test_a_budget_still_holds_after_redis_comes_back_empty(pair: Pair) -> None:
    """Last in the module: it empties the module's own Redis db, as a Redis keeping nothing on
    disk comes back from a restart."""
    team = pair.new_team("redis-emptied", monthly_budget_usd="0.0002")
    served = 0
    while isinstance(outcome := call_small(pair, served, team.key), Served):
        served += 1
    assert isinstance(outcome, openai.RateLimitError) and outcome.code == "insufficient_quota"
    spent = spend_of(pair, team.id, served)

    redis.Redis.from_url(REDIS_URL).flushdb()

    after = [call_small(pair, i, team.key) for i in range(4)]
    assert all(isinstance(o, openai.RateLimitError) and o.code == "insufficient_quota" for o in after)
    assert spend_of(pair, team.id, served) == spent


def call_small(pair: Pair, i: int, key: str) -> Served | openai.RateLimitError:
    try:
        raw = pair.client(i, key).chat.completions.with_raw_response.create(**SMALL)  # type: ignore[call-overload]
    except openai.RateLimitError as exc:
        return exc
    return Served(dict(raw.headers))
