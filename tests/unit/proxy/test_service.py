"""The batch flow of the proxy service: pins placed, confirmed, moved once; fallback; degraded mode.

The executor is faked at its seam (it is the only thing that talks to upstreams): each deployment
answers from a script, and every attempt is recorded. Pins live in a real store (memory or fakeredis).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field

import fakeredis
import pytest
from redis.asyncio import Redis

from gateway.dispatch.executor import Attempts
from gateway.errors import (
    PinnedProviderUnavailable,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)
from gateway.providers.base import Endpoint, TokenUsage, UpstreamCall, UpstreamResponse
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyContext, ProxyService, milliseconds
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives, Fallback, Priority
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore, PinStore, RedisPinStore
from gateway.routing.policy import rendezvous_choice
from gateway.scheduling.ticket import Ticket
from gateway.settings import CircuitSettings, RetrySettings
from tests.unit.proxy.usage_sink import Sink
from tests.unit.routing.catalog import CHAT, PLACED_TABLE, TABLE, principal

RETRY = RetrySettings(max_attempts=3)
US, EU, CLAUDE = CHAT["openai-us"], CHAT["vllm-eu"], CHAT["claude-us"]
BODY = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}'


@dataclass
class FakeExecutor:
    """Deployments in `failing` answer 503 (retryable); the rest succeed. Records each attempt."""

    failing: set[str] = field(default_factory=set)
    error: type[UpstreamError] = UpstreamUnavailable
    sent: list[str] = field(default_factory=list)
    body: bytes = b"{}"  # what every answer says

    async def send(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        attempts: Attempts,
        max_attempts: int,
        ticket: Ticket,
    ) -> UpstreamResponse:
        for _ in range(max_attempts):
            attempts.count += 1
            self.sent.append(deployment.id)
            await asyncio.sleep(0)
            if deployment.id not in self.failing:
                return UpstreamResponse(
                    body=self.body, usage=TokenUsage(prompt_tokens=3, completion_tokens=2)
                )
        raise self.error("injected")


@dataclass
class Harness:
    service: ProxyService
    executor: FakeExecutor
    pins: PinStore
    health: HealthBoard
    sink: Sink

    async def call(self, directives: Directives = Directives(), team: str = "team-1") -> Deployment:
        parsed = parse_request(BODY, Endpoint.CHAT, 100)
        ctx = ProxyContext(f"req-{random.random()}", principal(team), parsed, directives)
        return (await self.service.complete(ctx)).deployment


def harness(pins: PinStore | None = None, seed: int = 0, table: DeploymentTable = TABLE) -> Harness:
    health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=1000))
    executor, sink = FakeExecutor(), Sink()
    store = pins or MemoryPinStore(3600)
    service = ProxyService(table, store, health, executor, sink, RETRY, rng=random.Random(seed))  # type: ignore[arg-type]
    return Harness(service, executor, store, health, sink)


@pytest.fixture(params=["memory", "fakeredis"])
async def pins(request: pytest.FixtureRequest) -> PinStore:
    if request.param == "memory":
        return MemoryPinStore(3600)
    return RedisPinStore(fakeredis.FakeAsyncRedis(), 3600)


async def test_a_batch_stays_on_one_deployment(pins: PinStore) -> None:
    h = harness(pins)
    served = await asyncio.gather(*(h.call(Directives(batch="b1")) for _ in range(100)))
    assert len({d.id for d in served}) == 1
    pin = await pins.touch("team-1", "b1")
    assert pin is not None and pin.deployment == served[0].id and pin.confirmed


async def test_batches_spread_over_deployments(pins: PinStore) -> None:
    h = harness(pins)
    served = Counter([(await h.call(Directives(batch=f"b{i}"))).provider.name for i in range(60)])
    assert set(served) == {"openai-us", "vllm-eu", "claude-us"}


async def test_pinned_failure_is_503_and_never_moves_a_confirmed_batch(pins: PinStore) -> None:
    h = harness(pins)
    home = await h.call(Directives(batch="b1"))
    h.executor.failing.add(home.id)
    h.executor.sent.clear()
    with pytest.raises(PinnedProviderUnavailable) as caught:
        await h.call(Directives(batch="b1"))
    assert caught.value.status == 503 and caught.value.code == "pinned_provider_unavailable"
    assert h.executor.sent == [home.id] * RETRY.max_attempts
    pin = await pins.touch("team-1", "b1")
    assert pin is not None and pin.deployment == home.id
    assert h.sink.events[-1].status == 503 and h.sink.events[-1].deployment == home.id


async def test_an_unconfirmed_batch_moves_once_then_stays(pins: PinStore) -> None:
    h = harness(pins)
    directives = Directives(batch="b1", providers=("openai-us", "vllm-eu"))
    h.executor.failing.add(US.id)
    served = await asyncio.gather(*(h.call(directives) for _ in range(20)))
    assert {d.id for d in served} == {EU.id}
    pin = await pins.touch("team-1", "b1")
    assert pin is not None and (pin.deployment, pin.moves, pin.confirmed) == (EU.id, 1, True)
    h.executor.failing = {EU.id}
    h.executor.sent.clear()
    with pytest.raises(PinnedProviderUnavailable):
        await h.call(directives)
    assert set(h.executor.sent) == {EU.id}


async def test_a_moved_batch_that_fails_again_stays_put(pins: PinStore) -> None:
    h = harness(pins)
    directives = Directives(batch="b1", providers=("openai-us", "vllm-eu", "claude-us"))
    h.executor.failing = {US.id, EU.id}
    with pytest.raises(PinnedProviderUnavailable):
        await h.call(directives)
    assert set(h.executor.sent) == {US.id, EU.id}
    pin = await pins.touch("team-1", "b1")
    assert pin is not None and (pin.deployment, pin.moves) == (EU.id, 1)


async def test_non_retryable_errors_do_not_move_a_batch(pins: PinStore) -> None:
    h = harness(pins)
    h.executor.failing.add(US.id)
    h.executor.error = UpstreamRejected
    with pytest.raises(UpstreamRejected):
        await h.call(Directives(batch="b1", providers=("openai-us", "vllm-eu")))
    assert set(h.executor.sent) == {US.id}  # never moved to vllm-eu


async def test_unbatched_requests_fall_back_once_per_deployment() -> None:
    h = harness()
    h.executor.failing = {US.id, EU.id}
    served = await h.call()
    assert served == CLAUDE
    assert Counter(h.executor.sent)[US.id] <= 1 and Counter(h.executor.sent)[EU.id] <= 1


async def test_unbatched_requests_exhausting_every_deployment_get_the_upstream_error() -> None:
    h = harness()
    h.executor.failing = {US.id, EU.id, CLAUDE.id}
    h.executor.error = UpstreamRateLimited
    with pytest.raises(UpstreamRateLimited):
        await h.call()
    last = h.executor.sent[-1]
    assert Counter(h.executor.sent)[last] == RETRY.max_attempts  # the last one is retried in full


async def test_fallback_never_retries_on_one_deployment() -> None:
    h = harness()
    h.executor.failing = {US.id, EU.id, CLAUDE.id}
    with pytest.raises(UpstreamUnavailable) as caught:
        await h.call(Directives(fallback=Fallback.NEVER))
    assert not isinstance(caught.value, PinnedProviderUnavailable)
    assert len(set(h.executor.sent)) == 1 and len(h.executor.sent) == RETRY.max_attempts


async def test_open_circuits_steer_new_batches() -> None:
    h = harness()
    for _ in range(1000):
        await h.health.record_failure(EU.id)
        await h.health.record_failure(CLAUDE.id)
    served = {(await h.call(Directives(batch=f"b{i}"))).id for i in range(20)}
    assert served == {US.id}


async def test_degraded_mode_uses_rendezvous_and_says_so() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    one, two = harness(RedisPinStore(dead, 3600), seed=1), harness(RedisPinStore(dead, 3600), seed=2)
    for i in range(10):
        directives = Directives(batch=f"b{i}")
        expected = rendezvous_choice(f"team-1:b{i}", tuple(TABLE.by_model["chat"]))
        assert await one.call(directives) == expected
        assert await two.call(directives) == expected
    assert one.service.pins_degraded and two.service.pins_degraded
    await dead.aclose()


async def test_every_request_is_metered_once_with_its_batch() -> None:
    h = harness()
    await asyncio.gather(*(h.call(Directives(batch="b1")) for _ in range(5)), h.call())
    assert len(h.sink.events) == 6
    assert Counter(e.batch_id for e in h.sink.events) == {"b1": 5, None: 1}
    assert len({e.request_id for e in h.sink.events}) == 6


def test_durations_are_recorded_in_milliseconds_as_round_to_three_places_gives_them() -> None:
    rng = random.Random(11)
    for _ in range(100_000):
        seconds = rng.random() * rng.choice((0.001, 0.05, 2.0, 300.0))
        assert milliseconds(seconds) == round(seconds * 1000, 3)
    assert (milliseconds(0.0123456), milliseconds(0.0), milliseconds(61.5)) == (12.346, 0.0, 61500.0)


async def test_a_pinned_batch_that_keeps_being_rate_limited_passes_retry_after_on() -> None:
    h = harness()
    home = await h.call(Directives(batch="b1"))

    def rate_limited(message: str) -> UpstreamError:
        return UpstreamRateLimited(message, headers={"retry-after": "7"})

    h.executor.failing.add(home.id)
    h.executor.error = rate_limited  # type: ignore[assignment]
    with pytest.raises(PinnedProviderUnavailable) as refused:
        await h.call(Directives(batch="b1"))
    assert refused.value.headers.get("retry-after") == "7"


# --- the ticket: what the scheduler is asked for ----------------------------------------------

HANDBOOK = "Extract every field of the invoice. " * 120  # about 4.3 KB, 1,080 tokens


def scheduled(
    body: dict[str, object],
    team: str = "team-1",
    directives: Directives = Directives(),
    table: DeploymentTable = PLACED_TABLE,
) -> ProxyContext:
    parsed = parse_request(json.dumps({"model": "chat", **body}).encode(), Endpoint.CHAT, 100)
    ctx = ProxyContext("req-1", principal(team), parsed, directives)
    harness(table=table).service.schedule(ctx, Priority.INTERACTIVE, 10, 20)
    return ctx


def test_no_prefix_is_hashed_where_no_provider_has_replicas_or_capacity() -> None:
    assert all(d.provider.capacity is None and len(d.provider.urls) == 1 for d in TABLE.all())
    ctx = scheduled(asked("Invoice 1"), table=TABLE)
    assert ctx.ticket.prefix is None and ctx.ticket.leading is None


def asked(question: str, system: object = HANDBOOK, **extra: object) -> dict[str, object]:
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        **extra,
    }


def test_a_keyless_ticket_names_its_shared_prefix_alike_for_every_question() -> None:
    first, second = scheduled(asked("Invoice 1")), scheduled(asked("Invoice 2 " * 40))
    assert first.cache_key is None
    assert first.ticket.prefix is not None and first.ticket.prefix == second.ticket.prefix
    assert first.ticket.prefix_tokens == second.ticket.prefix_tokens
    assert abs(first.ticket.prefix_tokens - len(HANDBOOK) / 4) < 8  # bytes/4, as the estimate
    assert first.ticket.leading is not None and first.ticket.leading.blocks
    assert scheduled(asked("Invoice 1"), "team-2").ticket.prefix != first.ticket.prefix


def test_a_keyed_ticket_is_named_by_its_key_within_its_team() -> None:
    keyed = scheduled(asked("Invoice 1", prompt_cache_key="handbook"))
    header = scheduled(asked("Invoice 2"), directives=Directives(cache_key="handbook"))
    assert keyed.cache_key == header.cache_key == "handbook"
    assert keyed.ticket.prefix == header.ticket.prefix != "handbook"
    assert keyed.ticket.prefix_tokens == scheduled(asked("Invoice 1")).ticket.prefix_tokens
    other_team = scheduled(asked("Invoice 1", prompt_cache_key="handbook"), "team-2")
    assert other_team.ticket.prefix != keyed.ticket.prefix


def test_a_breakpoint_names_and_sizes_the_prefix() -> None:
    marked = [{"type": "text", "text": HANDBOOK, "cache_control": {"type": "ephemeral"}}]
    one = scheduled({"messages": [{"role": "user", "content": marked}, {"role": "user", "content": "a"}]})
    two = scheduled({"messages": [{"role": "user", "content": marked}, {"role": "user", "content": "b"}]})
    assert one.cache_key is not None and one.cache_key == two.cache_key  # derived once, here
    assert one.ticket.prefix == two.ticket.prefix
    assert one.ticket.prefix_tokens >= len(HANDBOOK) // 4


def test_a_short_prompt_has_no_prefix() -> None:
    ctx = scheduled({"messages": [{"role": "user", "content": "hi"}]})
    assert ctx.ticket.prefix is None and ctx.ticket.prefix_tokens == 0 and ctx.ticket.leading is None


async def test_a_conversation_follows_its_last_deployment_and_a_batch_does_not() -> None:
    h = harness(seed=1)
    body = json.dumps(
        {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "t-1"}
    )

    async def served(directives: Directives = Directives()) -> Deployment:
        ctx = ProxyContext(
            f"req-{random.random()}",
            principal(),
            parse_request(body.encode(), Endpoint.CHAT, 100),
            directives,
        )
        h.service.schedule(ctx, Priority.INTERACTIVE, 10, 20)
        return (await h.service.complete(ctx)).deployment

    first = await served()
    assert {(await served()).id for _ in range(20)} == {first.id}
    h.executor.failing.add(first.id)  # it fails: the request falls back, the conversation moves
    moved = await served()
    assert moved.id != first.id
    h.executor.failing.clear()
    assert {(await served()).id for _ in range(10)} == {moved.id}
    batched = {(await served(Directives(batch=f"b-{i}"))).id for i in range(30)}
    assert len(batched) > 1  # batches are placed by their pins, not by the conversation


async def test_a_responses_answer_starts_a_conversation_its_next_turn_follows() -> None:
    h = harness(seed=2)
    h.executor.body = b'{"id": "resp_abc", "object": "response", "output": []}'
    parsed = parse_request(b'{"model": "chat", "input": "hello"}', Endpoint.RESPONSES, 100)
    ctx = ProxyContext("req-1", principal(), parsed, Directives())
    h.service.schedule(ctx, Priority.INTERACTIVE, 10, 20)
    served = (await h.service.complete(ctx)).deployment

    follow = parse_request(
        b'{"model": "chat", "input": "more", "previous_response_id": "resp_abc"}', Endpoint.RESPONSES, 100
    )
    next_turn = ProxyContext("req-2", principal(), follow, Directives())
    h.service.schedule(next_turn, Priority.INTERACTIVE, 10, 20)
    assert next_turn.conversation is not None and next_turn.conversation.then is not None
    assert next_turn.conversation.then.deployment == served.id
    other_team = ProxyContext("req-3", principal("team-2"), follow, Directives())
    h.service.schedule(other_team, Priority.INTERACTIVE, 10, 20)
    assert other_team.conversation is not None and other_team.conversation.then is None
