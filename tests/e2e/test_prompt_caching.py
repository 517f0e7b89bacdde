"""Prompt-cache hints end to end (SPEC section 4): the OpenAI SDK -> `gateway serve` -> recording upstreams.

What each provider kind receives, the layouts refused before sending, one derived
`prompt_cache_key` across gateway processes, replica affinity for a self-hosted provider (by cache
key, by a keyless prompt's prefix, by conversation), and cached tokens priced exactly in the usage
report.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import anthropic
import openai
import pytest
import redis

from tests.e2e.caching_cases import EPHEMERAL, HANDBOOK, HINT_CASES, REJECTED_CASES, HintCase
from tests.e2e.caching_replicas import KEYS, home_replicas, placements, send_keyed_requests
from tests.e2e.stacks.caching import (
    MAIN_CONFIG,
    REDIS_URL,
    CachingStack,
    drop_database,
    gateway_env,
    replica_config,
)
from tests.support.gateway import GatewayProcess, recreate_database
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.e2e

MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class TeamKey:
    team_id: str
    key: str


@pytest.fixture(scope="module")
def caching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CachingStack]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_name = f"gateway_e2e_caching_{os.getpid()}"
    database_url = recreate_database(database_name)
    upstream = start_mock_upstream()
    workdir = tmp_path_factory.mktemp("caching")
    config = workdir / "gateway.yaml"
    config.write_text(MAIN_CONFIG.format(upstream=upstream.base_url))
    gateways: list[GatewayProcess] = []
    try:
        for _ in range(2):
            gateways.append(GatewayProcess(config, gateway_env(database_url)).start())
        stack = CachingStack(upstream, (gateways[0], gateways[1]), database_url, workdir)
        yield stack
        stack.close()
    finally:
        for gateway in gateways:
            gateway.stop()
        upstream.stop()
        drop_database(database_name)
        redis.Redis.from_url(REDIS_URL).flushdb()


@pytest.fixture(scope="module")
def team(caching: CachingStack) -> TeamKey:
    return TeamKey(*caching.new_team_key("caching-team"))


@pytest.fixture
def upstream(caching: CachingStack) -> Iterator[RunningUpstream]:
    caching.upstream.clear()
    caching.upstream.set_behaviour()
    yield caching.upstream
    caching.upstream.set_behaviour()


def holds_key(node: Any, name: str) -> bool:
    """Whether `name` is a key anywhere inside a JSON document."""
    if isinstance(node, dict):
        return name in node or any(holds_key(value, name) for value in node.values())
    if isinstance(node, list):
        return any(holds_key(item, name) for item in node)
    return False


# --- Anthropic: cache_control on the matching blocks ------------------------------------------


@pytest.mark.parametrize("case", HINT_CASES, ids=lambda case: case.name)
def test_anthropic_upstream_receives_the_hints_on_the_matching_blocks(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream, case: HintCase
) -> None:
    reply = caching.client(team.key).chat.completions.create(model="claude", max_tokens=64, **case.openai)

    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    [sent] = upstream.requests()
    assert sent["path"] == "/v1/messages"
    assert sent["body"] == case.anthropic


def test_anthropic_stream_carries_the_same_hints(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream
) -> None:
    case = HINT_CASES[0]
    chunks = list(
        caching.client(team.key).chat.completions.create(
            model="claude", max_tokens=64, stream=True, **case.openai
        )
    )

    assert chunks
    [sent] = upstream.requests()
    assert sent["body"] == {**case.anthropic, "stream": True}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("layout", sorted(REJECTED_CASES))
def test_layouts_anthropic_refuses_are_400_before_anything_is_sent(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream, layout: str, stream: bool
) -> None:
    client = caching.client(team.key)

    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="claude", messages=REJECTED_CASES[layout], stream=stream)  # type: ignore[arg-type]

    assert raised.value.code == "invalid_cache_control"
    assert upstream.stats()["total"] == 0


# --- OpenAI-kind upstreams: prompt_cache_key, never cache_control ------------------------------


def test_two_gateway_processes_derive_the_same_prompt_cache_key(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream
) -> None:
    def ask(gateway: int, document: str, key: str = team.key) -> Any:
        messages = [
            {"role": "system", "content": HANDBOOK, "cache_control": EPHEMERAL},
            {"role": "user", "content": document},
        ]
        client = caching.client(key, gateway)
        return client.chat.completions.create(model="gpt-hinted", messages=messages)  # type: ignore[arg-type]

    ask(0, "Invoice 7.")
    second = ask(1, "Invoice 7.")
    third = ask(1, "Invoice 8.")  # another document after the breakpoint: the same prefix
    ask(0, "Invoice 7.", key=caching.new_team_key("other-team")[1])

    bodies = [request["body"] for request in upstream.requests()]
    derived = bodies[0]["prompt_cache_key"]
    assert re.fullmatch(r"[0-9a-f]{32}", derived)
    assert [body["prompt_cache_key"] for body in bodies[1:3]] == [derived, derived]
    assert bodies[3]["prompt_cache_key"] != derived  # the key is per team
    assert bodies[0]["messages"] == [
        {"role": "system", "content": HANDBOOK},
        {"role": "user", "content": "Invoice 7."},
    ]
    assert second.usage.prompt_tokens_details.cached_tokens > 0  # the upstream's cache hit, reported
    assert third.usage.prompt_tokens_details.cached_tokens > 0


def test_the_clients_cache_key_and_retention_are_forwarded(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream
) -> None:
    client = caching.client(team.key)
    messages: Any = [{"role": "system", "content": HANDBOOK, "cache_control": EPHEMERAL}]
    client.chat.completions.create(
        model="gpt-hinted", messages=messages, prompt_cache_key="invoices-v1", prompt_cache_retention="24h"
    )
    client.chat.completions.create(
        model="gpt-hinted", messages=messages, extra_headers={"X-Gateway-Cache-Key": "nightly-batch"}
    )
    client.chat.completions.create(
        model="gpt-hinted", messages=messages, extra_body={"gateway": {"cache_key": "body-key"}}
    )

    bodies = [request["body"] for request in upstream.requests()]
    assert [(b["prompt_cache_key"], b.get("prompt_cache_retention")) for b in bodies] == [
        ("invoices-v1", "24h"),
        ("nightly-batch", None),
        ("body-key", None),
    ]
    assert not any(holds_key(body, "gateway") for body in bodies)


HINTED_EVERYWHERE: Any = {
    "tools": [
        {"type": "function", "function": {"name": "lookup", "parameters": {}}, "cache_control": EPHEMERAL}
    ],
    "messages": [
        {"role": "system", "content": HANDBOOK, "cache_control": EPHEMERAL},
        {"role": "user", "content": [{"type": "text", "text": "Invoice 9.", "cache_control": EPHEMERAL}]},
    ],
}


def test_no_cache_control_reaches_an_openai_kind_upstream(
    caching: CachingStack, team: TeamKey, upstream: RunningUpstream
) -> None:
    client = caching.client(team.key)
    client.chat.completions.create(model="gpt-hinted", **HINTED_EVERYWHERE)
    client.chat.completions.create(
        model="llama-plain", prompt_cache_key="k", prompt_cache_retention="24h", **HINTED_EVERYWHERE
    )

    hinted, plain = (request["body"] for request in upstream.requests())
    assert not holds_key(hinted, "cache_control")
    assert hinted["prompt_cache_key"]
    assert hinted["tools"] == [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    assert not holds_key(plain, "cache_control")
    assert "prompt_cache_key" not in plain and "prompt_cache_retention" not in plain
    assert plain["messages"][1] == {"role": "user", "content": [{"type": "text", "text": "Invoice 9."}]}


# --- cached tokens priced exactly ---------------------------------------------------------------


def batch_row(caching: CachingStack, team_id: str, batch: str, requests: int) -> dict[str, Any]:
    rows = caching.usage_rows(requests, team_id=team_id, group_by="batch,model")
    [row] = [row for row in rows if row["batch_id"] == batch]
    return row


def test_anthropic_cache_reads_and_writes_are_priced_exactly(
    caching: CachingStack, upstream: RunningUpstream
) -> None:
    team_id, key = caching.new_team_key("priced-anthropic")
    upstream.set_behaviour(prompt_tokens=2000, completion_tokens=50)
    client = caching.client(key, default_headers={"X-Gateway-Batch": "claude-invoices"})
    messages: Any = [
        {"role": "system", "content": HANDBOOK, "cache_control": EPHEMERAL},
        {"role": "user", "content": "Invoice 10."},
    ]
    first = client.chat.completions.create(model="claude", messages=messages)
    second = client.chat.completions.create(model="claude", messages=messages)

    # The mock counts a token per 4 bytes: the 1,120-byte system block is a 280-token prefix,
    # written to the cache by the first request and read by the second.
    prefix = 280
    assert first.usage is not None and second.usage is not None
    assert (first.usage.prompt_tokens, first.usage.prompt_tokens_details.cached_tokens) == (2000, 0)
    assert (second.usage.prompt_tokens, second.usage.prompt_tokens_details.cached_tokens) == (2000, prefix)
    # USD per million tokens: input 3, output 15, cached_input 0.30, cache_write 3.75.
    write_cost = (1720 * Decimal("3") + prefix * Decimal("3.75") + 50 * Decimal("15")) / MILLION
    read_cost = (1720 * Decimal("3") + prefix * Decimal("0.30") + 50 * Decimal("15")) / MILLION
    uncached = 2 * (2000 * Decimal("3") + 50 * Decimal("15")) / MILLION
    assert write_cost + read_cost == Decimal("0.012954")

    row = batch_row(caching, team_id, "claude-invoices", 2)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (2, 4000, 100)
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (prefix, prefix)
    assert Decimal(row["cost"]) == write_cost + read_cost
    assert Decimal(row["saving"]) == uncached - write_cost - read_cost == Decimal("0.000546")


def test_openai_cached_tokens_are_priced_at_the_cached_input_price(
    caching: CachingStack, upstream: RunningUpstream
) -> None:
    team_id, key = caching.new_team_key("priced-openai")
    upstream.set_behaviour(prompt_tokens=1000, cached_tokens=600, completion_tokens=10)
    client = caching.client(key, default_headers={"X-Gateway-Batch": "gpt-invoices"})
    for document in ("Invoice 11.", "Invoice 12."):
        reply = client.chat.completions.create(
            model="gpt-hinted", messages=[{"role": "user", "content": document}]
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details.cached_tokens == 600

    # USD per million tokens: input 0.50, output 1.50, cached_input 0.25 (cache_write unset).
    each = (400 * Decimal("0.50") + 600 * Decimal("0.25") + 10 * Decimal("1.50")) / MILLION
    row = batch_row(caching, team_id, "gpt-invoices", 2)
    assert (row["prompt_tokens"], row["cached_tokens"], row["cache_write_tokens"]) == (2000, 1200, 0)
    assert Decimal(row["cost"]) == 2 * each == Decimal("0.00073")
    assert Decimal(row["saving"]) == 2 * 600 * (Decimal("0.50") - Decimal("0.25")) / MILLION


# --- replica affinity for a self-hosted provider ------------------------------------------------


@pytest.fixture
def replicas() -> Iterator[list[RunningUpstream]]:
    started: list[RunningUpstream] = []
    try:
        for _ in range(3):
            started.append(start_mock_upstream())
        yield started
    finally:
        for replica in started:
            replica.stop()


def serve_replicas(caching: CachingStack, replicas: list[RunningUpstream], name: str) -> GatewayProcess:
    """A gateway whose only provider is a self-hosted server with these replica base_urls.

    Its load bound is out of reach: these tests show where consistent hashing sends a key, and on a
    busy machine the default bound (1.5x the mean) spills enough of a key's requests to move its
    majority. The bound has its own tests."""
    config = caching.workdir / f"{name}.yaml"
    config.write_text(replica_config(replicas, affinity_load_bound=1000))
    return GatewayProcess(config, gateway_env(caching.database_url)).start()


def test_a_cache_key_stays_on_one_replica_and_losing_a_replica_moves_only_its_keys(
    caching: CachingStack, team: TeamKey, replicas: list[RunningUpstream]
) -> None:
    gateway = serve_replicas(caching, replicas, "three-replicas")
    try:
        send_keyed_requests(gateway.base_url + "/v1", team.key, per_key=50)
    finally:
        gateway.stop()

    seen = placements(replicas)
    assert sorted(seen) == list(KEYS)
    assert sum(sum(counts.values()) for counts in seen.values()) == 1000
    before = home_replicas(seen)  # every key at home on one replica
    assert set(before.values()) == {0, 1, 2}  # and the 20 keys spread over all three

    removed = 1
    for replica in replicas:
        replica.clear()
    gateway = serve_replicas(caching, [r for i, r in enumerate(replicas) if i != removed], "two-replicas")
    try:
        send_keyed_requests(gateway.base_url + "/v1", team.key, per_key=10, concurrency=8)
    finally:
        gateway.stop()

    after = home_replicas(placements(replicas))
    assert sorted(after) == list(KEYS)
    assert replicas[removed].stats()["total"] == 0
    moved = {key for key in KEYS if after[key] != before[key]}
    assert moved == {key for key in KEYS if before[key] == removed}
    assert moved, "the removed replica served no key, so nothing was shown to move"


# --- prefix and conversation affinity without a cache key ----------------------------------------

# Five: an odd count, so that requests taken in turn (round robin) would split every handbook.
HANDBOOKS = [f"Handbook {n}: " + "extract every field of the invoice, exactly. " * 60 for n in range(5)]


def serve_two_replicas(caching: CachingStack, replicas: list[RunningUpstream], name: str) -> GatewayProcess:
    """Two replicas; a request may be tried twice, so that a failing replica's request is retried
    at the other one."""
    config = caching.workdir / f"{name}.yaml"
    config.write_text(replica_config(replicas[:2]).replace("max_attempts: 1", "max_attempts: 2"))
    return GatewayProcess(config, gateway_env(caching.database_url)).start()


def replica_of(replicas: list[RunningUpstream], marker: str) -> list[int]:
    """Which replicas (by index) received a request whose last message contains `marker`."""
    found = []
    for index, replica in enumerate(replicas):
        for request in replica.requests():
            if marker in str(request["body"]["messages"][-1]["content"]):
                found.append(index)
    return found


def test_keyless_requests_sharing_a_system_prompt_meet_on_one_replica(
    caching: CachingStack, team: TeamKey, replicas: list[RunningUpstream]
) -> None:
    gateway = serve_two_replicas(caching, replicas, "prefix-affinity")
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=team.key, max_retries=0)
    try:
        for i in range(35):  # no cache key, no breakpoint: a system prompt and a question
            messages = [
                {"role": "system", "content": HANDBOOKS[i % len(HANDBOOKS)]},
                {"role": "user", "content": f"question {i}"},
            ]
            client.chat.completions.create(model="llama", messages=messages, max_tokens=4)  # type: ignore[arg-type]
    finally:
        client.close()
        gateway.stop()

    homes: dict[int, set[int]] = {n: set() for n in range(len(HANDBOOKS))}
    for index, replica in enumerate(replicas[:2]):
        for request in replica.requests():
            system = request["body"]["messages"][0]["content"]
            homes[HANDBOOKS.index(system)].add(index)
    assert all(len(home) == 1 for home in homes.values()), homes  # round robin would split each
    assert sum(len(replica.requests()) for replica in replicas[:2]) == 35


def test_a_conversation_follows_its_replica_and_moves_when_that_one_fails(
    caching: CachingStack, team: TeamKey, replicas: list[RunningUpstream]
) -> None:
    gateway = serve_two_replicas(caching, replicas, "conversation-affinity")
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=team.key, max_retries=0)

    def turn(user: str, number: int) -> None:
        client.messages.create(  # short, unrelated prompts: only the session ties them together
            model="llama",
            max_tokens=4,
            messages=[{"role": "user", "content": f"{user} turn {number}"}],
            metadata={"user_id": user},
        )

    try:
        for number in range(4):  # two of alice's turns to one of bob's: taken in turn, both would split
            turn("alice", 2 * number)
            turn("alice", 2 * number + 1)
            turn("bob", number)
        [alice_home] = set(replica_of(replicas, "alice turn"))
        assert len(set(replica_of(replicas, "bob turn"))) == 1
        assert len(replica_of(replicas, "alice turn")) == 8

        replicas[alice_home].set_behaviour(fail_rate=1.0, fail_status=503)
        for number in range(8, 12):
            turn("alice", number)  # the first is retried at the other replica; the rest go there
        replicas[alice_home].set_behaviour()
        for number in range(12, 16):
            turn("alice", number)  # the conversation stays where it was served last
    finally:
        client.close()
        gateway.stop()

    other = 1 - alice_home
    assert replica_of(replicas, "alice turn").count(other) == 8
    failed_there = [
        request
        for request in replicas[alice_home].requests()
        if "alice turn" in str(request["body"]["messages"][-1]["content"])
    ]
    assert len(failed_there) == 9  # the 8 served there, and the one it failed
