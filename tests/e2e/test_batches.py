"""Batch semantics end to end (SPEC 3): two `gateway serve` processes sharing Redis and PostgreSQL,
in front of two mock upstreams (providers `east` in us-east and `west` in eu-west) serving `chat`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import Counter
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.stacks import batches as fixtures
from tests.e2e.stacks.batches import FAILURE_THRESHOLD, MAX_ATTEMPTS, BatchStack

upstream_pair = fixtures.upstream_pair
batch_stack = fixtures.batch_stack
pair = fixtures.pair
redis_down_stack = fixtures.redis_down_stack

MESSAGES = [{"role": "user", "content": "Summarise the quarterly report in one line."}]
OTHER = {"east": "west", "west": "east"}


def batch_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def ask(client: openai.OpenAI, **kwargs: Any) -> Any:
    """One chat completion; returns the raw response (headers) and its parsed body."""
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES, **kwargs)
    return raw  # noqa: RET504  (named for the reader)


def served_by(pair: BatchStack, key: str, count: int, **headers: str) -> list[str]:
    """`count` requests alternating between both processes; the provider that served each."""
    providers = []
    for i in range(count):
        raw = ask(pair.client(key, gateway=i % 2, default_headers=headers))
        providers.append(raw.headers["x-gateway-provider"])
    return providers


def error_of(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def batch_view(pair: BatchStack, key: str, batch: str, gateway: int = 0) -> httpx.Response:
    with pair.http(key, gateway) as http:
        return http.get(f"/v1/gateway/batches/{batch}")


def settled_view(pair: BatchStack, key: str, batch: str, requests: int) -> dict[str, Any]:
    """The batch view once the metering writer has persisted `requests` records."""
    view: dict[str, Any] = {}
    for _ in range(100):
        view = batch_view(pair, key, batch).json()
        if view.get("requests") == requests:
            return view
        time.sleep(0.1)
    raise AssertionError(f"batch totals never reached {requests} requests: {view}")


# --- (a) one batch, 500 concurrent requests, two processes: one deployment ---------------------


async def test_500_concurrent_requests_of_a_batch_land_on_one_deployment(pair: BatchStack) -> None:
    team = pair.new_team("batch-a")
    batch = batch_id()
    clients = pair.async_clients(team.key, default_headers={"X-Gateway-Batch": batch})
    gateways = itertools.cycle(clients)

    async def one(client: openai.AsyncOpenAI, i: int) -> str:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": f"document {i}"}]
        )
        raw.parse()
        return raw.headers["x-gateway-provider"]

    providers = await asyncio.gather(*(one(next(gateways), i) for i in range(500)))
    for client in clients:
        await client.close()
    assert len(set(providers)) == 1, Counter(providers)
    pinned = providers[0]
    assert len(pair.received(pinned)) == 500
    assert pair.received(OTHER[pinned]) == []
    assert {r["body"]["model"] for r in pair.received(pinned)} == {f"{pinned}-chat"}
    view = settled_view(pair, team.key, batch, 500)
    assert view["provider"] == pinned and view["confirmed"] is True and view["moves"] == 0


# --- (b) the pinned upstream fails after the batch succeeded -----------------------------------


def test_a_failing_pinned_upstream_gives_503_and_fallback_happens_between_batches(pair: BatchStack) -> None:
    team = pair.new_team("batch-b")
    batch = batch_id()
    (pinned,) = set(served_by(pair, team.key, 4, **{"X-Gateway-Batch": batch}))
    healthy = OTHER[pinned]
    pair.upstreams[pinned].set_behaviour(fail_rate=1.0, fail_status=500)
    pair.upstreams[pinned].clear()
    pair.upstreams[healthy].clear()

    for i in range(2):
        error = error_of(
            lambda i=i: ask(pair.client(team.key, gateway=i, default_headers={"X-Gateway-Batch": batch}))
        )
        assert error.status_code == 503
        assert error.code == "pinned_provider_unavailable"
    assert len(pair.received(pinned)) == 2 * MAX_ATTEMPTS  # retried on the same deployment
    assert pair.received(healthy) == []  # never moved
    assert 2 * MAX_ATTEMPTS >= FAILURE_THRESHOLD
    pair.wait_for_circuits({pinned: "open", healthy: "closed"})
    assert batch_view(pair, team.key, batch).json()["provider"] == pinned  # the pin stays

    tried_pinned = len(pair.received(pinned))
    assert set(served_by(pair, team.key, 4, **{"X-Gateway-Batch": batch_id()})) == {healthy}
    assert set(served_by(pair, team.key, 6)) == {healthy}
    assert len(pair.received(pinned)) == tried_pinned  # an open circuit gets no new work
    error = error_of(lambda: ask(pair.client(team.key, default_headers={"X-Gateway-Batch": batch})))
    assert error.code == "pinned_provider_unavailable"


# --- (c) a 429 with Retry-After is retried on the same deployment --------------------------------


def test_a_429_with_retry_after_is_retried_on_the_same_deployment(pair: BatchStack) -> None:
    team = pair.new_team("batch-c")
    # seed 1: the mock's first draw fails (0.13 < 0.5), its second succeeds (0.85)
    pair.upstreams["east"].set_behaviour(fail_rate=0.5, fail_status=429, retry_after=0.2, seed=1)
    headers = {"X-Gateway-Batch": batch_id(), "X-Gateway-Provider": "east"}
    raw = ask(pair.client(team.key, default_headers=headers))
    assert raw.headers["x-gateway-provider"] == "east"
    assert raw.parse().choices[0].message.content
    assert len(pair.received("east")) == 2
    assert pair.received("west") == []


# --- (d) a batch whose first placement fails before any success moves once ---------------------


def test_an_unconfirmed_batch_moves_once_and_then_stays(pair: BatchStack) -> None:
    team = pair.new_team("batch-d")
    batch = batch_id()
    headers = {"X-Gateway-Batch": batch, "X-Gateway-Provider": "east,west"}  # placed on east first
    pair.upstreams["east"].set_behaviour(fail_rate=1.0, fail_status=503)

    async def burst() -> list[str]:
        clients = pair.async_clients(team.key, default_headers=headers)
        calls = [
            clients[i % 2].chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)
            for i in range(20)
        ]
        raws = await asyncio.gather(*calls)
        for client in clients:
            await client.close()
        return [raw.headers["x-gateway-provider"] for raw in raws]

    assert set(asyncio.run(burst())) == {"west"}
    view = settled_view(pair, team.key, batch, 20)
    assert (view["provider"], view["moves"], view["confirmed"]) == ("west", 1, True)

    pair.upstreams["east"].set_behaviour()
    pair.upstreams["west"].set_behaviour(fail_rate=1.0, fail_status=500)
    pair.upstreams["east"].clear()
    error = error_of(lambda: ask(pair.client(team.key, gateway=1, default_headers=headers)))
    assert error.code == "pinned_provider_unavailable"
    assert pair.received("east") == []  # it stays on west
    assert batch_view(pair, team.key, batch).json()["moves"] == 1


# --- (e) every directive, header and body forms, and the batch endpoints ------------------------


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"X-Gateway-Region": "eu-west"}, None, "west"),
        ({"X-Gateway-Region": "us-east"}, None, "east"),
        (None, {"region": "eu-west"}, "west"),
        ({"X-Gateway-Provider": "east"}, None, "east"),
        ({"X-Gateway-Provider": "west,east"}, None, "west"),
        (None, {"provider": "east"}, "east"),
        (None, {"provider": ["west", "east"]}, "west"),
        ({"X-Gateway-Region": "eu-west"}, {"region": "eu-west", "fallback": "never"}, "west"),
        ({"X-Gateway-Fallback": "never", "X-Gateway-Provider": "east"}, {"fallback": "never"}, "east"),
    ],
)
def test_routing_directives(
    pair: BatchStack, headers: dict[str, str] | None, body: dict[str, Any] | None, expected: str
) -> None:
    team = pair.new_team(f"dir-{uuid.uuid4().hex[:6]}")
    client = pair.client(team.key, default_headers=headers or {})
    for _ in range(3):
        raw = ask(client, extra_body={"gateway": body} if body else None)
        assert raw.headers["x-gateway-provider"] == expected
    assert pair.received(OTHER[expected]) == []
    for request in pair.received(expected):
        assert "gateway" not in request["body"]  # removed before forwarding


def test_cache_key_directive_header_and_body(pair: BatchStack) -> None:
    team = pair.new_team("cache-key")
    client = pair.client(
        team.key, default_headers={"X-Gateway-Provider": "east", "X-Gateway-Cache-Key": "doc-7"}
    )
    ask(client)
    ask(
        pair.client(team.key, default_headers={"X-Gateway-Provider": "east"}),
        extra_body={"gateway": {"cache_key": "doc-8"}},
    )
    keys = [r["body"].get("prompt_cache_key") for r in pair.received("east")]
    assert keys == ["doc-7", "doc-8"]


def test_fallback_never_stays_and_the_default_falls_back(pair: BatchStack) -> None:
    team = pair.new_team("fallback")
    pair.upstreams["east"].set_behaviour(fail_rate=1.0, fail_status=500)
    never = {"X-Gateway-Fallback": "never", "X-Gateway-Provider": "east,west"}
    error = error_of(lambda: ask(pair.client(team.key, default_headers=never)))
    assert error.status_code >= 500 and error.code != "pinned_provider_unavailable"
    assert len(pair.received("east")) == MAX_ATTEMPTS and pair.received("west") == []
    raw = ask(pair.client(team.key, default_headers={"X-Gateway-Provider": "east,west"}))
    assert raw.headers["x-gateway-provider"] == "west"  # an unbatched request falls back
    assert len(pair.received("east")) == MAX_ATTEMPTS + 1  # east was tried once more, not retried


@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "param", "says"),
    [
        ({"X-Gateway-Region": "mars"}, None, 400, "no_route", "X-Gateway-Region", "eu-west, us-east"),
        (None, {"region": "mars"}, 400, "no_route", "X-Gateway-Region", "eu-west, us-east"),
        ({"X-Gateway-Provider": "ghost"}, None, 400, "no_route", "X-Gateway-Provider", "east, west"),
        (None, {"provider": ["east", "ghost"]}, 400, "no_route", "X-Gateway-Provider", "ghost"),
        ({"X-Gateway-Region": "eu-west", "X-Gateway-Provider": "east"}, None, 400, "no_route", "model",
         "east (us-east), west (eu-west)"),
        ({"X-Gateway-Region": "eu-west"}, {"region": "us-east"}, 400, "directive_conflict", "gateway.region", "eu-west"),
        ({"X-Gateway-Batch": "a"}, {"batch": "b"}, 400, "directive_conflict", "gateway.batch", "batch"),
        ({"X-Gateway-Provider": "east"}, {"provider": "west"}, 400, "directive_conflict", "gateway.provider", "east"),
        ({"X-Gateway-Fallback": "never"}, {"fallback": "batch"}, 400, "directive_conflict", "gateway.fallback", "never"),
        ({"X-Gateway-Cache-Key": "k1"}, {"cache_key": "k2"}, 400, "directive_conflict", "gateway.cache_key", "k1"),
        ({"X-Gateway-Batch": "no spaces"}, None, 400, None, "X-Gateway-Batch", "1-128"),
        (None, {"batch": "x" * 129}, 400, None, "gateway.batch", "1-128"),
        ({"X-Gateway-Fallback": "maybe"}, None, 400, None, "X-Gateway-Fallback", "never"),
        (None, {"fallback": 1}, 400, None, "gateway.fallback", "string"),
        (None, {"provider": 7}, 400, None, "gateway.provider", "list of strings"),
        (None, {"regoin": "eu-west"}, 400, None, "gateway", "regoin"),
        ({"X-Gateway-Cache-Key": "k" * 300}, None, 400, None, "X-Gateway-Cache-Key", "characters"),
    ],
)  # fmt: skip
def test_directive_errors(
    pair: BatchStack,
    headers: dict[str, str] | None,
    body: dict[str, Any] | None,
    status: int,
    code: str | None,
    param: str,
    says: str,
) -> None:
    team = pair.new_team(f"err-{uuid.uuid4().hex[:6]}")
    client = pair.client(team.key, default_headers=headers or {})
    error = error_of(lambda: ask(client, extra_body={"gateway": body} if body else None))
    assert error.status_code == status
    assert error.body["type"] == "invalid_request_error"  # type: ignore[index]
    if code is not None:
        assert error.code == code
    assert error.param == param
    assert says in error.message
    assert pair.received("east") == [] and pair.received("west") == []


def test_data_residency(pair: BatchStack) -> None:
    team = pair.new_team("eu-only", allowed_regions=["eu-west"])
    assert set(served_by(pair, team.key, 4)) == {"west"}  # unpinned requests stay inside
    assert set(served_by(pair, team.key, 2, **{"X-Gateway-Batch": batch_id()})) == {"west"}
    for headers, body in (
        ({"X-Gateway-Region": "us-east"}, None),
        (None, {"region": "us-east"}),
        ({"X-Gateway-Provider": "east"}, None),
    ):
        error = error_of(lambda h=headers, b=body: ask(
            pair.client(team.key, default_headers=h or {}), extra_body={"gateway": b} if b else None
        ))  # fmt: skip
        assert error.status_code == 403
        assert error.code == "region_not_allowed"
    assert pair.received("east") == []


def test_a_batch_pinned_elsewhere_conflicts_with_new_directives(pair: BatchStack) -> None:
    team = pair.new_team("pin-conflict")
    batch = batch_id()
    ask(pair.client(team.key, default_headers={"X-Gateway-Batch": batch, "X-Gateway-Region": "us-east"}))
    error = error_of(
        lambda: ask(
            pair.client(team.key, default_headers={"X-Gateway-Batch": batch}),
            extra_body={"gateway": {"region": "eu-west"}},
        )
    )
    assert (error.status_code, error.code) == (400, "batch_pin_conflict")


def test_batch_endpoints_show_the_pin_and_totals(pair: BatchStack) -> None:
    team, other = pair.new_team("totals"), pair.new_team("totals-other")
    batch = batch_id()
    for i in range(6):
        client = pair.client(team.key, gateway=i % 2)
        ask(client, extra_body={"gateway": {"batch": batch}}, max_tokens=5 + i)
    view = settled_view(pair, team.key, batch, 6)
    row = pair.admin.get(
        "/admin/usage", params={"team_id": team.id, "batch": batch, "group_by": "batch"}
    ).json()
    (usage,) = row["data"]
    for field in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens"):
        assert view[field] == usage[field], field
    assert Decimal(view["cost"]) == Decimal(usage["cost"]) > 0
    assert view["object"] == "gateway.batch" and view["id"] == batch
    provider = view["provider"]
    assert view["region"] == {"east": "us-east", "west": "eu-west"}[provider]
    assert view["deployment"] == f"{provider}/{provider}-chat" and view["model"] == "chat"
    assert view["created"] <= view["last_used"]
    assert batch_view(pair, team.key, batch, gateway=1).json()["requests"] == 6  # either process

    assert batch_view(pair, other.key, batch).status_code == 404  # scoped to the caller's team
    with pair.http(other.key) as http:
        assert http.delete(f"/v1/gateway/batches/{batch}").status_code == 404
    with pair.http(team.key, gateway=1) as http:
        ended = http.delete(f"/v1/gateway/batches/{batch}")
        assert ended.status_code == 200 and ended.json()["deleted"] is True
        assert http.delete(f"/v1/gateway/batches/{batch}").status_code == 404
    missing = batch_view(pair, team.key, batch)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"
    assert batch_view(pair, team.key, "bad id!").status_code in (400, 404)

    ask(pair.client(team.key), extra_body={"gateway": {"batch": batch}})  # the same id starts anew
    restarted = settled_view(pair, team.key, batch, 1)
    assert restarted["created"] >= view["created"]


# --- (f) Redis unreachable: rendezvous hashing keeps batches together ---------------------------


BATCHES_WITHOUT_REDIS = 16


def test_without_redis_a_batch_still_stays_together(
    redis_down_stack: BatchStack, batch_stack: BatchStack
) -> None:
    batch_stack.reset()
    down = redis_down_stack
    team = batch_stack.new_team("no-redis")
    for n in range(BATCHES_WITHOUT_REDIS):
        for i in range(6):
            client = down.client(
                team.key, gateway=i % 2, default_headers={"X-Gateway-Batch": f"degraded-{n}"}
            )
            with contextlib.suppress(openai.APIStatusError):  # see the metering test below
                client.chat.completions.create(
                    model="chat", messages=[{"role": "user", "content": f"degraded-{n} part {i}"}]
                )
    homes: dict[str, set[str]] = {}
    for provider in ("east", "west"):
        for request in down.received(provider):
            batch = request["body"]["messages"][0]["content"].split()[0]  # type: ignore[index]
            homes.setdefault(batch, set()).add(provider)
    assert len(homes) == BATCHES_WITHOUT_REDIS
    assert sum(len(down.received(p)) for p in ("east", "west")) == 6 * BATCHES_WITHOUT_REDIS
    assert all(len(served) == 1 for served in homes.values()), homes  # rendezvous: both processes agree
    # different batches spread out (all 16 on one side by chance: 2 in 65,536)
    assert set().union(*homes.values()) == {"east", "west"}


def test_without_redis_readyz_reports_the_degradation(redis_down_stack: BatchStack) -> None:
    for gateway in redis_down_stack.gateways:
        ready = httpx.get(gateway.base_url + "/readyz", timeout=30)
        assert ready.status_code == 200  # it serves, degraded (docs/operations.md, "Readiness")
        report = ready.json()
        assert report["redis"].startswith("unreachable")
        assert "redis" in report["degraded"]
        assert "batch_pins" in report["degraded"]  # the batch test above ran first in this module


def test_without_redis_requests_are_still_served(
    redis_down_stack: BatchStack, batch_stack: BatchStack
) -> None:
    team = batch_stack.new_team("no-redis-served")
    raw = ask(redis_down_stack.client(team.key, default_headers={"X-Gateway-Batch": "degraded-served"}))
    assert raw.headers["x-gateway-provider"] in ("east", "west")
