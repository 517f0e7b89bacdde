"""The executor against a real mock upstream process: replica choice, retries, errors, streams.

The executor is given the upstream connection pool, so it is exercised over real HTTP against
`gateway mock-upstream` (the seam), with failures injected through the mock's behaviour; the
built-in `mock` provider kind is served in-process, by the client services wire in for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest

from gateway.dispatch.executor import Attempts, Executor, backoff_delay
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.dispatch.stream import OpenStream
from gateway.errors import UpstreamError, UpstreamRateLimited, UpstreamTimeout, UpstreamUnavailable
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.health import CircuitState, HealthBoard
from gateway.schemas.openai import ChatCompletionRequest
from gateway.services import in_process_mock
from gateway.settings import (
    Capacity,
    Catalog,
    CircuitSettings,
    LimitSettings,
    Provider,
    ProviderKind,
    RetrySettings,
)
from tests.support.catalogs import catalog, provider
from tests.support.gateway import free_port
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

RETRY = RetrySettings(max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.002, retry_after_cap_s=0.001)


@pytest.fixture(scope="module")
def mock() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture()


@pytest.fixture
def upstream(mock: RunningUpstream) -> Iterator[RunningUpstream]:
    mock.clear()
    mock.set_behaviour()
    yield mock
    mock.set_behaviour()


class Harness:
    """An executor over one catalog, its health board, and the deployment of each provider."""

    def __init__(self, catalog: Catalog) -> None:
        table = DeploymentTable.from_catalog(catalog)
        self.deployments = {d.provider.name: d for d in table.all()}
        ids = [d.id for d in self.deployments.values()]
        self.health = HealthBoard(ids, CircuitSettings(failure_threshold=100))
        self.executor = Executor(
            catalog, self.health, UpstreamPool(), mock=in_process_mock(catalog), rng=random.Random(7)
        )

    def deployment(self, name: str = "up") -> Deployment:
        return self.deployments[name]


@pytest.fixture
async def harnesses() -> AsyncIterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for harness in made:
        await harness.executor.aclose()


def make(harnesses: list[Harness], *providers: Provider, limits: LimitSettings = LimitSettings()) -> Harness:
    harness = Harness(catalog(*providers, retry=RETRY, limits=limits))
    harnesses.append(harness)
    return harness


def chat_call(text: str = "hello", *, stream: bool = False, cache_key: str | None = None) -> UpstreamCall:
    body: dict[str, Any] = {"model": "alias", "messages": [{"role": "user", "content": text}]}
    if stream:
        body["stream"] = True
    return UpstreamCall(
        endpoint=Endpoint.CHAT,
        body=body,
        upstream_model="up-upstream",
        stream=stream,
        client_wants_usage=True,
        team_id="team-1",
        chat=msgspec.convert(body, ChatCompletionRequest),
        cache_key=cache_key,
    )


# --- sending and replica choice -----------------------------------------------------------------


async def test_send_returns_the_parsed_response_and_records_success(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(
        harnesses, provider(base_url=f"{upstream.base_url}/v1", api_key="sk-up", headers={"x-org": "o"})
    )
    attempts = Attempts()

    response = await harness.executor.send(harness.deployment(), chat_call(), attempts, max_attempts=3)

    assert response.usage is not None and response.usage.completion_tokens > 0
    assert msgspec.json.decode(response.body)["object"] == "chat.completion"
    assert attempts.count == 1 and attempts.errors == [] and attempts.ttft_s is None  # not streamed
    [sent] = upstream.requests()
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["model"] == "up-upstream"
    assert sent["headers"]["authorization"] == "Bearer sk-up"
    assert sent["headers"]["x-org"] == "o"
    assert harness.health.in_flight[harness.deployment().id] == 0


def replica_urls(upstream: RunningUpstream) -> list[str]:
    return [f"{upstream.base_url}/replica-{i}/v1" for i in range(3)]


def replicas_hit(upstream: RunningUpstream) -> list[str]:
    return [request["path"].split("/")[1] for request in upstream.requests()]


async def test_a_cache_key_always_goes_to_the_same_replica(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_urls=tuple(replica_urls(upstream))))
    deployment = harness.deployment()

    for key in ("prefix-a", "prefix-b", "prefix-c", "prefix-d"):
        upstream.clear()
        for _ in range(5):
            await harness.executor.send(deployment, chat_call(cache_key=key), Attempts(), 1)
        assert len(set(replicas_hit(upstream))) == 1, key


async def test_removing_a_replica_moves_only_the_keys_it_held(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    urls = replica_urls(upstream)
    keys = [f"key-{i}" for i in range(30)]

    async def homes(base_urls: list[str]) -> dict[str, str]:
        harness = make(harnesses, provider(base_urls=tuple(base_urls)))
        placed = {}
        for key in keys:
            upstream.clear()
            await harness.executor.send(harness.deployment(), chat_call(cache_key=key), Attempts(), 1)
            [placed[key]] = replicas_hit(upstream)
        return placed

    before = await homes(urls)
    after = await homes([urls[0], urls[2]])

    assert set(before.values()) == {"replica-0", "replica-1", "replica-2"}
    moved = {key for key in keys if before[key] != after[key]}
    assert moved == {key for key in keys if before[key] == "replica-1"}


async def test_without_a_cache_key_replicas_take_turns(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_urls=tuple(replica_urls(upstream))))

    for _ in range(6):
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), 1)

    assert replicas_hit(upstream) == ["replica-0", "replica-1", "replica-2"] * 2


def test_a_mock_provider_needs_its_in_process_client() -> None:
    mock_catalog = catalog(provider("builtin", kind=ProviderKind.MOCK), retry=RETRY)
    health = HealthBoard(["builtin"], CircuitSettings())
    with pytest.raises(ValueError, match="mock provider"):
        Executor(mock_catalog, health, UpstreamPool())


async def test_the_mock_kind_is_served_in_process(harnesses: list[Harness]) -> None:
    harness = make(harnesses, provider("builtin", kind=ProviderKind.MOCK))

    response = await harness.executor.send(harness.deployment("builtin"), chat_call(), Attempts(), 1)

    assert response.usage is not None and response.usage.prompt_tokens > 0


# --- failures -----------------------------------------------------------------------------------


async def test_retryable_failures_are_retried_on_the_same_deployment_then_raised(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=500)
    attempts = Attempts()

    with pytest.raises(UpstreamError) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), attempts, max_attempts=3)

    assert raised.value.status == 502 and raised.value.retryable
    assert upstream.stats()["total"] == 3
    assert attempts.count == 3 and len(attempts.errors) == 3
    assert harness.health.state_of(harness.deployment().id)[1] == 3
    assert harness.health.in_flight[harness.deployment().id] == 0


async def test_a_retry_after_the_first_failure_can_succeed(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=0.5, seed=_seed_failing_first_then_passing())
    attempts = Attempts()

    response = await harness.executor.send(harness.deployment(), chat_call(), attempts, max_attempts=3)

    assert response.usage is not None
    assert attempts.count == 2
    assert harness.health.state_of(harness.deployment().id)[1] == 0  # a success resets the count


def _seed_failing_first_then_passing() -> int:
    """A seed for which the mock's `fail_rate=0.5` draw fails the first request, passes the second."""
    for seed in range(1000):
        draws = random.Random(seed)
        if draws.random() < 0.5 <= draws.random():
            return seed
    raise AssertionError("no seed found")


async def test_a_request_the_upstream_rejects_is_not_retried(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=400)
    attempts = Attempts()

    with pytest.raises(UpstreamError) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), attempts, max_attempts=3)

    assert not raised.value.retryable and raised.value.status == 400
    assert upstream.stats()["total"] == 1 and attempts.count == 1
    assert harness.health.state_of(harness.deployment().id)[1] == 0  # the client's fault, not the provider's


async def test_rate_limit_carries_retry_after(upstream: RunningUpstream, harnesses: list[Harness]) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=429, retry_after=7)

    with pytest.raises(UpstreamRateLimited) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), max_attempts=1)

    assert raised.value.retry_after_s == 7


async def test_an_unreadable_body_is_a_bad_response(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(garbage=True)

    with pytest.raises(UpstreamError) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), max_attempts=1)

    assert raised.value.code == "upstream_bad_response"


async def test_a_hanging_upstream_times_out(upstream: RunningUpstream, harnesses: list[Harness]) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1", timeout_s=0.2))
    upstream.set_behaviour(hang=True)

    with pytest.raises(UpstreamTimeout):
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), max_attempts=1)


async def test_a_refused_connection_is_unavailable(harnesses: list[Harness]) -> None:
    harness = make(harnesses, provider(base_url=f"http://127.0.0.1:{free_port()}/v1"))
    attempts = Attempts()

    with pytest.raises(UpstreamUnavailable):
        await harness.executor.send(harness.deployment(), chat_call(), attempts, max_attempts=2)

    assert attempts.count == 2


async def test_responses_over_the_size_cap_are_refused(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    limits = LimitSettings(max_upstream_response_bytes=64)
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"), limits=limits)

    with pytest.raises(UpstreamError) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), max_attempts=1)

    assert raised.value.code == "upstream_too_large"


# --- streams --------------------------------------------------------------------------------------


async def frames_of(stream: OpenStream, received: list[bytes] | None = None) -> list[bytes]:
    """Every frame of the stream as the relay reads them, then the stream closed, however it ends."""
    received = [] if received is None else received
    try:
        async with contextlib.aclosing(stream.frames()) as frames:
            async for frame in frames:
                received.append(frame)
    finally:
        await stream.close()
    return received


async def test_a_stream_is_relayed_frame_by_frame_with_its_usage(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    attempts = Attempts()

    stream = await harness.executor.open_stream(harness.deployment(), chat_call(stream=True), attempts, 3)
    frames = await frames_of(stream)

    assert frames[-1] == b"data: [DONE]\n\n"
    assert all(frame.startswith(b"data: ") and frame.endswith(b"\n\n") for frame in frames)
    assert stream.finished and stream.translator.usage is not None
    assert upstream.requests()[-1]["body"]["stream_options"] == {"include_usage": True}
    assert attempts.count == 1 and attempts.ttft_s is not None


async def test_a_stream_failing_before_its_first_byte_is_retried(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=503)
    attempts = Attempts()

    with pytest.raises(UpstreamUnavailable):
        await harness.executor.open_stream(harness.deployment(), chat_call(stream=True), attempts, 3)

    assert upstream.stats()["total"] == 3 and attempts.count == 3


async def test_a_stream_dropped_after_its_first_frames_ends_in_an_error_and_is_not_retried(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_after_chunks=2, chunks=6)

    stream = await harness.executor.open_stream(harness.deployment(), chat_call(stream=True), Attempts(), 3)
    received: list[bytes] = []

    with pytest.raises(UpstreamError):
        await frames_of(stream, received)

    assert received and b"[DONE]" not in b"".join(received)
    assert not stream.finished
    assert upstream.stats()["total"] == 1


# --- backoff --------------------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", [1, 2, 3, 8, 30])
def test_backoff_is_between_half_and_all_of_a_capped_doubling_step(attempt: int) -> None:
    retry = RetrySettings(backoff_base_s=0.2, backoff_max_s=5.0)
    step = min(5.0, 0.2 * 2 ** (attempt - 1))
    rng = random.Random(attempt)
    delays = [backoff_delay(retry, attempt, rng) for _ in range(200)]
    assert all(step / 2 <= delay <= step for delay in delays)
    assert max(delays) - min(delays) > step / 4  # jittered, not constant


# --- capacity -----------------------------------------------------------------------------------


async def test_a_stream_holds_its_permit_until_it_is_closed(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(
        harnesses, provider(base_url=f"{upstream.base_url}/v1", capacity=Capacity(max_concurrency=1))
    )
    stream = await harness.executor.open_stream(harness.deployment(), chat_call(stream=True), Attempts(), 1)
    waiting_attempts = Attempts()
    waiting = asyncio.create_task(
        harness.executor.send(harness.deployment(), chat_call(), waiting_attempts, 1)
    )
    await asyncio.sleep(0.05)
    assert not waiting.done() and len(upstream.requests()) == 1  # the second was never sent

    await frames_of(stream)
    await stream.close()
    await asyncio.wait_for(waiting, 5.0)

    assert waiting_attempts.queue_s > 0 and len(upstream.requests()) == 2
    [gate] = harness.executor.scheduler.providers["up"].gates
    assert gate.in_flight == 0


async def test_every_attempt_gives_its_permit_back(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(
        harnesses, provider(base_url=f"{upstream.base_url}/v1", capacity=Capacity(max_concurrency=1))
    )
    upstream.set_behaviour(fail_rate=1.0, fail_status=503)

    with pytest.raises(UpstreamUnavailable):
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), 3)
    with pytest.raises(UpstreamUnavailable):
        await harness.executor.open_stream(harness.deployment(), chat_call(stream=True), Attempts(), 3)

    [gate] = harness.executor.scheduler.providers["up"].gates
    assert gate.in_flight == 0 and gate.tokens_in_flight == 0 and upstream.stats()["total"] == 6


# --- upstream 429s: retried, never counted against the circuit -------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rate_limited_deployment_is_retried_but_its_circuit_stays_closed(
    upstream: RunningUpstream, harnesses: list[Harness], stream: bool
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=429, retry_after=0)
    attempts = Attempts()
    deployment = harness.deployment()

    with pytest.raises(UpstreamRateLimited):
        await (
            harness.executor.open_stream(deployment, chat_call(stream=True), attempts, 3)
            if stream
            else harness.executor.send(deployment, chat_call(), attempts, max_attempts=3)
        )

    assert upstream.stats()["total"] == 3 and attempts.count == 3
    assert attempts.errors == ["upstream_rate_limited"] * 3
    assert harness.health.state_of(deployment.id) == (CircuitState.CLOSED, 0)


async def test_rate_limits_leave_earlier_failures_counted_as_they_were(
    upstream: RunningUpstream, harnesses: list[Harness]
) -> None:
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    deployment = harness.deployment()
    upstream.set_behaviour(fail_rate=1.0, fail_status=500)
    with pytest.raises(UpstreamError):
        await harness.executor.send(deployment, chat_call(), Attempts(), max_attempts=2)
    upstream.set_behaviour(fail_rate=1.0, fail_status=429)
    with pytest.raises(UpstreamRateLimited):
        await harness.executor.send(deployment, chat_call(), Attempts(), max_attempts=2)

    assert harness.health.state_of(deployment.id) == (CircuitState.CLOSED, 2)  # neither reset nor added


@pytest.mark.parametrize(("sent", "replied"), [(2, "2"), (1.2, "2"), (0, "1"), (None, "1")])
async def test_giving_up_on_a_rate_limit_replies_with_retry_after(
    upstream: RunningUpstream, harnesses: list[Harness], sent: float | None, replied: str
) -> None:
    """The upstream's own wait, rounded up to whole seconds; a short default when it sent none."""
    harness = make(harnesses, provider(base_url=f"{upstream.base_url}/v1"))
    upstream.set_behaviour(fail_rate=1.0, fail_status=429, retry_after=sent)

    with pytest.raises(UpstreamRateLimited) as raised:
        await harness.executor.send(harness.deployment(), chat_call(), Attempts(), max_attempts=2)

    assert raised.value.headers["retry-after"] == replied
    assert upstream.stats()["total"] == 2  # the gateway waited at most its cap: the test's is 1 ms
