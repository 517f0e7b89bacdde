"""A stored Response is its team's: through two `gateway serve` processes sharing one Redis and one
PostgreSQL, in front of a mock upstream that serves /v1/responses itself, a team may continue its
own Responses (`previous_response_id`) at either process, at once, and another team naming them is
refused with OpenAI's 404 before anything goes upstream (the mock's recorded requests show none).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.e2e.stacks.responses import ADMIN_KEY, CONFIG
from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database
from tests.support.servers import PrivateRedis
from tests.support.upstream import RunningUpstream, start_mock_upstream

PINNED = {"X-Gateway-Provider": "openai-us"}  # `gpt` passed through, at one deployment


@dataclass
class TwoGateways:
    first: GatewayProcess
    second: GatewayProcess
    upstream: RunningUpstream
    redis: redis.Redis
    admin: httpx.Client

    def client(self, gateway: GatewayProcess, team: Team, *, pinned: bool = True) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=gateway.base_url + "/v1",
            api_key=team.key,
            max_retries=0,
            default_headers=PINNED if pinned else None,
        )

    def records(self, team: Team) -> list[dict[str, Any]]:
        page = self.admin.get("/admin/usage/events", params={"team_id": team.id, "limit": 100})
        rows: list[dict[str, Any]] = page.raise_for_status().json()["data"]
        return rows


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoGateways]:
    workdir = tmp_path_factory.mktemp("response-owners")
    database_url = recreate_database(f"gateway_e2e_response_owners_{os.getpid()}")
    store = PrivateRedis(appendonly=False).start()  # this suite's own, shared by both processes
    upstream = start_mock_upstream()
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": store.url(0),
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }
    first, second = GatewayProcess(config, env), GatewayProcess(config, env)
    client = redis.Redis(port=store.port)
    try:
        first.start()
        second.start()
        admin = httpx.Client(base_url=first.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        yield TwoGateways(first, second, upstream, client, admin)
        admin.close()
    finally:
        first.stop()
        second.stop()
        upstream.stop()
        client.close()
        store.destroy()


def sent_upstream(upstream: RunningUpstream, response_id: str) -> int:
    """The requests that reached the mock naming `response_id` as their previous response."""
    return sum(
        1
        for request in upstream.requests()
        if isinstance(request.get("body"), dict)
        and request["body"].get("previous_response_id") == response_id
    )


def test_a_team_continues_its_own_responses_and_no_other_team_can(gateways: TwoGateways) -> None:
    alice, bob = create_team(gateways.admin, "owners-a"), create_team(gateways.admin, "owners-b")
    a_first, a_second = gateways.client(gateways.first, alice), gateways.client(gateways.second, alice)
    b_first, b_second = gateways.client(gateways.first, bob), gateways.client(gateways.second, bob)

    created = a_first.responses.create(model="gpt", input="Remember the word 'tangerine'.")
    # at once, at the other process: known there through Redis before any record is written
    followed = a_second.responses.create(model="gpt", input="Which word?", previous_response_id=created.id)
    assert followed.previous_response_id == created.id
    assert sent_upstream(gateways.upstream, created.id) == 1

    for client in (b_first, b_second):
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.create(model="gpt", input="Which word?", previous_response_id=created.id)
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["type"] == "invalid_request_error" and error["param"] == "previous_response_id"
        assert created.id in error["message"]
    assert sent_upstream(gateways.upstream, created.id) == 1  # Bob's never left the gateway

    # A stream's Response is its team's from its response.created on
    with a_second.responses.stream(model="gpt", input="Count to three.") as stream:
        streamed = stream.get_final_response()
    with pytest.raises(openai.NotFoundError):
        b_first.responses.create(model="gpt", input="Go on.", previous_response_id=streamed.id)
    a_first.responses.create(model="gpt", input="Go on.", previous_response_id=streamed.id)
    assert sent_upstream(gateways.upstream, streamed.id) == 1

    # conversations are created by POST /v1/conversations, which the gateway does not serve
    for conversation in ("conv_someone_elses", {"id": "conv_someone_elses"}):
        with pytest.raises(openai.NotFoundError) as unknown:
            a_first.responses.create(model="gpt", input="Hi", extra_body={"conversation": conversation})
        assert isinstance(unknown.value.body, dict) and unknown.value.body["param"] == "conversation"

    # a translated provider continues it too, at either process: the gateway stored it and rebuilds
    # the conversation (tests/e2e/test_stored_responses.py); another team's is a 404 there as well
    for gateway in (gateways.first, gateways.second):
        continued = gateways.client(gateway, alice, pinned=False).responses.create(
            model="llama", input="Hi", previous_response_id=created.id
        )
        assert continued.previous_response_id == created.id
        with pytest.raises(openai.NotFoundError):
            gateways.client(gateway, bob, pinned=False).responses.create(
                model="llama", input="Hi", previous_response_id=created.id
            )

    print(f"\nrecords: alice {len(gateways.records(alice))}, bob {len(gateways.records(bob))}")
    assert gateways.records(bob) == []  # a refused request reached no upstream: nothing to bill


def test_ownership_outlives_the_shared_cache(gateways: TwoGateways) -> None:
    """Once the usage writer has recorded the owner, the database answers for ids no cache holds."""
    alice, bob = create_team(gateways.admin, "durable-a"), create_team(gateways.admin, "durable-b")
    created = gateways.client(gateways.first, alice).responses.create(model="gpt", input="Hello")
    for _ in range(80):  # the record (and with it the owner row) is written
        if any(r["endpoint"] == "responses" for r in gateways.records(alice)):
            break
        time.sleep(0.25)
    gateways.redis.delete(f"gateway:response-owner:{created.id}")

    with pytest.raises(openai.NotFoundError):
        gateways.client(gateways.second, bob).responses.create(
            model="gpt", input="Hi", previous_response_id=created.id
        )
    gateways.client(gateways.second, alice).responses.create(
        model="gpt", input="Hi", previous_response_id=created.id
    )
    assert sent_upstream(gateways.upstream, created.id) == 1
