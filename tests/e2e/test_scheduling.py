"""Scheduling end to end (SPEC section 8): the openai SDK -> `gateway serve` -> the simulated vLLM.

Caps that hold across processes and come back from a killed one, the limits of waiting, priority
classes, fairness in tokens between teams, replica affinity, back-pressure from the server's own
metrics, and what /admin/providers and /metrics show. Every check is on counts and order; the
simulators are time-scaled so that the whole module runs in well under two minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2  # the openai SDK's HTTP client
import openai
import pytest
from openai import AsyncStream
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam
from openai.types.completion_usage import CompletionUsage
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.stacks.scheduling import SchedulingStack, eventually, scheduling_stack
from tests.support.gateway import Team

pytestmark = pytest.mark.e2e

HOLD_TOKENS = 1500  # a held stream at the time-scale-1 simulator: about fifteen seconds of tokens
DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulingStack]:
    with scheduling_stack(tmp_path_factory.mktemp("scheduling")) as running:
        yield running


def messages(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


@dataclass
class Reply:
    """One finished request: its name in the case, its headers, and the usage it reported."""

    name: str
    headers: Mapping[str, str]
    usage: CompletionUsage

    @property
    def queue_ms(self) -> float:
        return float(self.headers["x-gateway-queue-ms"])

    @property
    def served(self) -> int:
        """Tokens served as the fair queue counts them: uncached prompt plus completion."""
        details = self.usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details else 0
        return self.usage.prompt_tokens - cached + self.usage.completion_tokens


async def chat(
    client: openai.AsyncOpenAI,
    model: str,
    *,
    name: str = "",
    text: str = "hello",
    max_tokens: int = 4,
    stream: bool = False,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One chat completion read to its end (a stream with its usage chunk)."""
    body: dict[str, Any] = {"model": model, "messages": messages(text), "max_tokens": max_tokens}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    raw = await client.chat.completions.with_raw_response.create(**body, extra_headers=headers)
    if not stream:
        usage = raw.parse().usage
    else:
        usage = None
        async for chunk in raw.parse():
            usage = chunk.usage or usage
    assert usage is not None
    return Reply(name, raw.headers, usage)


@dataclass
class HeldStream:
    """A stream that has its first chunk and is left open: it holds its permit until closed."""

    headers: Mapping[str, str]
    stream: AsyncStream[ChatCompletionChunk]

    async def close(self) -> None:
        with contextlib.suppress(httpx2.HTTPError, openai.APIError):  # its gateway may be gone
            await self.stream.close()


async def hold(client: openai.AsyncOpenAI, model: str, max_tokens: int = HOLD_TOKENS) -> HeldStream:
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=messages("hold the line"), max_tokens=max_tokens, stream=True
    )
    stream = raw.parse()
    assert isinstance(stream, AsyncStream)
    await stream.__anext__()
    return HeldStream(raw.headers, stream)


async def until_queued(
    stack: SchedulingStack, provider: str, gateway: int = 0, *, interactive: int = 0, batch: int = 0
) -> None:
    """Wait until `gateway` shows exactly these requests queued at the provider's one replica."""
    want = {"interactive": interactive, "batch": batch}

    async def arrived() -> bool:
        [replica] = await stack.replicas(provider, gateway)
        return bool(replica["queued"] == want)

    await eventually(arrived, DEADLINE_S, f"{want} queued for {provider}")


async def refusal(call: Awaitable[Reply]) -> openai.APIStatusError:
    """The error a request was refused with; fails when it was served."""
    try:
        reply = await call
    except openai.APIStatusError as exc:
        return exc
    raise AssertionError(f"served, not refused: {reply.headers['x-request-id']}")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(series: Samples, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


# --- caps ----------------------------------------------------------------------------------------


async def test_a_cap_holds_across_two_processes_for_streams_and_whole_replies(stack: SchedulingStack) -> None:
    team = stack.new_team("caps")
    sim = stack.sims.fast
    await sim.reset(0)
    clients = [stack.client(team.key, 0), stack.client(team.key, 1)]

    async def one(i: int) -> Reply:
        client = clients[i % 2]
        return await chat(client, "capped", name=str(i), text=f"request {i}", max_tokens=6, stream=i % 4 < 2)

    try:
        replies = await asyncio.gather(*(one(i) for i in range(200)))
    finally:
        for client in clients:
            await client.close()

    stats = await sim.stats(0)
    assert stats["requests_finished"] == 200
    # The simulator would run 256 at once: only the gateways' shared cap of 4 held it, streams
    # included (a stream holds its permit until its last chunk).
    assert stats["max_running"] <= 4
    assert stats["max_running"] == 4  # ...and the cap was used, not merely respected
    assert all(reply.usage.completion_tokens == 6 for reply in replies)
    assert all(reply.queue_ms >= 0 for reply in replies)  # every reply says how long it waited
    assert sum(reply.queue_ms > 0 for reply in replies) > 100  # most of the 200 waited for a permit


async def test_the_permits_of_a_killed_process_come_back(stack: SchedulingStack) -> None:
    team = stack.new_team("kill")
    doomed = stack.spare_gateway()
    held: list[HeldStream] = []
    waiting: list[asyncio.Task[HeldStream]] = []
    async with stack.client(team.key, doomed) as doomed_client, stack.client(team.key, 1) as survivor:
        try:
            held = [await hold(doomed_client, "held") for _ in range(4)]
            [replica] = await stack.replicas("held", 1)
            assert replica["in_flight"] == 0
            assert replica["all_processes"]["in_flight"] == 4  # the cap is the doomed process's

            waiting = [asyncio.create_task(hold(survivor, "held")) for _ in range(4)]
            await until_queued(stack, "held", 1, interactive=4)
            assert not any(task.done() for task in waiting)

            doomed.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            doomed.process.wait()  # type: ignore[union-attr]

            _, pending = await asyncio.wait(waiting, timeout=DEADLINE_S)
            assert not pending, "the killed process's permits did not come back"
            # All four open at once through the survivor, each with its first token: the whole
            # cap is usable again.
            [replica] = await stack.replicas("held", 1)
            assert replica["in_flight"] == 4
            assert replica["all_processes"]["in_flight"] == 4
            assert replica["queued"] == {"interactive": 0, "batch": 0}
        finally:
            for task in waiting:
                task.cancel()
            for outcome in await asyncio.gather(*waiting, return_exceptions=True):
                if isinstance(outcome, HeldStream):
                    await outcome.close()
            for stream in held:
                await stream.close()
            doomed.stop()


# --- how long a request waited ---------------------------------------------------------------------


async def test_every_reply_says_how_long_it_waited(stack: SchedulingStack) -> None:
    team = stack.new_team("queue-ms")
    async with stack.client(team.key) as client:
        holder = await hold(client, "shown")
        try:
            later = [
                asyncio.create_task(chat(client, "shown", stream=stream, name=str(stream)))
                for stream in (False, True)
            ]
            await until_queued(stack, "shown", interactive=2)
        finally:
            await holder.close()
        replies = await asyncio.gather(*later)

    assert float(holder.headers["x-gateway-queue-ms"]) == 0  # a permit was free: no wait at all
    assert [reply.queue_ms > 0 for reply in replies] == [True, True]


# --- limits of waiting ---------------------------------------------------------------------------


async def test_a_request_that_waits_too_long_gets_queue_timeout_and_is_neither_sent_nor_metered(
    stack: SchedulingStack,
) -> None:
    holder_team, patient = stack.new_team("timeout-holder"), stack.new_team("timeout-patient")
    sim = stack.sims.steady
    async with stack.client(holder_team.key, 2) as holder_client, stack.client(patient.key, 2) as client:
        holder = await hold(holder_client, "timed")
        try:
            await sim.reset(2)
            error = await refusal(chat(client, "timed", text="too late"))
            stats = await sim.stats(2)
        finally:
            await holder.close()

        assert error.status_code == 429
        assert error.code == "queue_timeout"
        assert float(error.response.headers["retry-after"]) > 0
        assert float(error.response.headers["x-gateway-queue-ms"]) > 0
        # The simulator admitted nothing after the holder: the timed-out request never reached it.
        assert (stats["prompt_tokens"], stats["max_waiting"], stats["running"]) == (0, 0, 1)

        async def released() -> bool:
            [replica] = await stack.replicas("timed", 2)
            return bool(replica["all_processes"]["in_flight"] == 0)

        await eventually(released, DEADLINE_S, "the holder's permit back")
        served = await chat(client, "timed", text="in time")

    served_id = served.headers["x-request-id"]

    async def recorded() -> bool:
        return any(event["request_id"] == served_id for event in await stack.usage_events(patient))

    await eventually(recorded, DEADLINE_S, "the served request's usage record")
    # Only the served request is metered: the one that timed out in the queue left no record.
    assert [event["request_id"] for event in await stack.usage_events(patient)] == [served_id]


async def test_a_full_queue_refuses_with_queue_full(stack: SchedulingStack) -> None:
    team = stack.new_team("full")
    async with stack.client(team.key, 2) as client:
        holder = await hold(client, "full")
        try:
            # A batch request waits (its class's timeout is long) and fills the one place.
            waiting = asyncio.create_task(chat(client, "full", headers={"X-Gateway-Priority": "batch"}))
            await until_queued(stack, "full", 2, batch=1)
            refused = await refusal(chat(client, "full", text="no room"))
        finally:
            await holder.close()
        served = await waiting

    assert refused.status_code == 429
    assert refused.code == "queue_full"
    assert float(refused.response.headers["retry-after"]) > 0
    assert served.queue_ms > 0
    shed = samples(await stack.metrics(2))
    assert sample(shed, "gateway_requests_shed_total", provider="full", reason="queue_full") == 1


# --- priority ------------------------------------------------------------------------------------


async def test_interactive_work_goes_before_queued_batch_work(stack: SchedulingStack) -> None:
    team = stack.new_team("priority")
    sim = stack.sims.steady
    batch = {"X-Gateway-Batch": f"nightly-{uuid.uuid4().hex[:8]}"}
    finished: list[str] = []

    async def run(client: openai.AsyncOpenAI, name: str, headers: dict[str, str]) -> Reply:
        reply = await chat(client, "ordered", name=name, stream=True, headers=headers)
        finished.append(name)
        return reply

    async with stack.client(team.key) as client:
        holder = await hold(client, "ordered")
        try:
            batches = [asyncio.create_task(run(client, f"batch-{i}", batch)) for i in range(4)]
            await until_queued(stack, "ordered", batch=4)
            interactive = asyncio.create_task(run(client, "interactive", {}))
            await until_queued(stack, "ordered", interactive=1, batch=4)
            await sim.reset(1)
            # The server keeps generating for a client that left, so the holder still runs there
            # after it is closed: what runs now is the baseline.
            baseline = (await sim.stats(1))["running"]
        finally:
            await holder.close()
        replies = await asyncio.gather(interactive, *batches)

    assert finished[0] == "interactive"
    assert sorted(finished[1:]) == [f"batch-{i}" for i in range(4)]
    assert all(reply.queue_ms > 0 for reply in replies)
    # One stream at a time: each held the single permit until its end.
    assert (await sim.stats(1))["max_running"] <= baseline + 1


async def test_an_unknown_priority_is_a_400_naming_the_header(stack: SchedulingStack) -> None:
    team = stack.new_team("urgent")
    async with stack.client(team.key) as client:
        error = await refusal(chat(client, "ordered", headers={"X-Gateway-Priority": "urgent"}))
    assert error.status_code == 400
    assert "X-Gateway-Priority" in error.message


# --- fairness ------------------------------------------------------------------------------------

HEAVY_PROMPT_CHARS = 2000  # about 500 tokens at the simulator's four characters a token
LIGHT_PROMPT_CHARS = 120  # about 30 tokens
LIGHT_REQUESTS = 120
FAST_HOLD_TOKENS = 10_000  # a held stream at the time-scale-0.2 simulator: about twenty seconds


def prompt(label: str, number: int, chars: int) -> str:
    """A prompt unique from its first characters, so that no request finds another's prefix cached."""
    head = f"{label} {number:04d} {uuid.uuid4().hex} "
    return (head + "lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


async def contest(stack: SchedulingStack, heavy: Team, light: Team, heavy_requests: int) -> dict[str, int]:
    """Both teams' requests queue behind a held stream, the heavy team's first; once it is closed,
    the tokens each team was served while both were waiting, up to the light team's last reply."""
    finished: list[Reply] = []

    async def run(client: openai.AsyncOpenAI, name: str, number: int, chars: int) -> None:
        finished.append(await chat(client, "fair", name=name, text=prompt(name, number, chars)))

    holder_team = stack.new_team("fair-holder")
    async with (
        stack.client(holder_team.key) as holder_client,
        stack.client(heavy.key) as heavy_client,
        stack.client(light.key) as light_client,
    ):
        holder = await hold(holder_client, "fair", max_tokens=FAST_HOLD_TOKENS)
        try:
            tasks = [
                asyncio.create_task(run(heavy_client, "heavy", i, HEAVY_PROMPT_CHARS))
                for i in range(heavy_requests)
            ]
            await until_queued(stack, "fair", interactive=heavy_requests)
            # In arrival order (FIFO) every heavy request would go before the first light one.
            tasks += [
                asyncio.create_task(run(light_client, "light", i, LIGHT_PROMPT_CHARS))
                for i in range(LIGHT_REQUESTS)
            ]
            await until_queued(stack, "fair", interactive=heavy_requests + LIGHT_REQUESTS)
        finally:
            await holder.close()
        await asyncio.gather(*tasks)

    last_light = max(i for i, reply in enumerate(finished) if reply.name == "light")
    served = {"heavy": 0, "light": 0}
    for reply in finished[: last_light + 1]:
        served[reply.name] += reply.served
    return served


async def test_teams_share_a_busy_replica_in_tokens_by_weight(stack: SchedulingStack) -> None:
    even = await contest(stack, stack.new_team("heavy"), stack.new_team("light"), heavy_requests=14)
    assert 0.6 <= even["heavy"] / even["light"] <= 1.6, even

    heavy = stack.new_team("heavy-weighted")
    stack.set_weight(heavy, 2)
    weighted = await contest(stack, heavy, stack.new_team("light"), heavy_requests=24)
    assert 1.4 <= weighted["heavy"] / weighted["light"] <= 3.0, weighted


# --- affinity ------------------------------------------------------------------------------------

SHARED_DOCUMENT = "A long shared document that every question about it repeats first. " * 12


async def replica_counts(stack: SchedulingStack) -> list[int]:
    """Requests finished at each of `spread`'s four replicas since their last reset."""
    sim = stack.sims.fast
    return [(await sim.stats(index))["requests_finished"] for index in range(2, 6)]


async def test_a_cache_key_keeps_to_one_replica_and_no_key_spreads_the_load(stack: SchedulingStack) -> None:
    team = stack.new_team("affinity")
    sim = stack.sims.fast
    homes: dict[str, int] = {}
    async with stack.client(team.key, 0) as first, stack.client(team.key, 1) as second:
        for key_number in range(8):
            key = f"doc-{key_number}-{uuid.uuid4().hex[:6]}"
            for index in range(2, 6):
                await sim.reset(index)
            for question in range(4):  # through both processes in turn: they agree on the replica
                client = (first, second)[question % 2]
                text = f"{key} {SHARED_DOCUMENT} Question {question}?"
                await chat(client, "spread", text=text, headers={"X-Gateway-Cache-Key": key})
            counts = await replica_counts(stack)
            assert sorted(counts) == [0, 0, 0, 4], (key, counts)
            homes[key] = counts.index(4)
            hits = (await sim.stats(2 + homes[key]))["prefix_cache_hits"]
            assert hits > 0  # the later questions found the document in that replica's cache

        assert len(set(homes.values())) > 1  # keys hash to different replicas, not all to one

        for index in range(2, 6):
            await sim.reset(index)
        gate = asyncio.Semaphore(8)

        async def unkeyed(number: int) -> Reply:
            async with gate:
                return await chat(first, "spread", text=f"question {number}")

        await asyncio.gather(*(unkeyed(n) for n in range(40)))
    counts = await replica_counts(stack)
    assert sum(counts) == 40
    assert min(counts) > 0, counts  # without a key every replica takes a part


# --- back-pressure -------------------------------------------------------------------------------


async def flood(stack: SchedulingStack, model: str, team: Team, requests: int) -> list[Reply]:
    async with stack.client(team.key) as client:
        return await asyncio.gather(
            *(chat(client, model, text=f"flood {i}", max_tokens=8) for i in range(requests))
        )


async def test_the_server_metrics_keep_its_own_queue_short(stack: SchedulingStack) -> None:
    team = stack.new_team("pressure")
    sim = stack.sims.small
    await sim.reset(0)
    replies = await flood(stack, "pressured", team, 100)

    stats = await sim.stats(0)
    assert len(replies) == stats["requests_finished"] == 100
    assert stats["max_running"] <= 4
    # A hundred at once, no static cap: the server's queue stayed short because the gateway held
    # dispatch while the server's /metrics said it was saturated.
    assert stats["max_waiting"] <= 16, stats  # arrivals between two server steps count as waiting
    [replica] = await stack.replicas("pressured")
    assert replica["server_load"]["stale"] is False


async def test_unreadable_server_metrics_never_fail_a_request(stack: SchedulingStack) -> None:
    team = stack.new_team("blind")
    sim = stack.sims.small
    await sim.reset(1)
    replies = await flood(stack, "blind", team, 100)

    stats = await sim.stats(1)
    assert len(replies) == stats["requests_finished"] == 100
    # Nothing held the flood (there are no static caps): the server queued it itself, which is
    # what the metrics above spared it.
    assert stats["max_waiting"] > 16, stats
    [replica] = await stack.replicas("blind")
    assert replica["server_load"]["stale"] is True


# --- what the gateway shows ----------------------------------------------------------------------


async def test_admin_providers_and_metrics_show_replicas_and_queues(stack: SchedulingStack) -> None:
    team = stack.new_team("shown")
    async with stack.client(team.key) as client:
        holder = await hold(client, "shown")
        try:
            later = [asyncio.create_task(chat(client, "shown", text=f"later {i}")) for i in range(2)]
            await until_queued(stack, "shown", interactive=2)
            [here] = await stack.replicas("shown", 0)
            [there] = await stack.replicas("shown", 1)
            series = samples(await stack.metrics(0))
        finally:
            await holder.close()
        await asyncio.gather(*later)
    after = samples(await stack.metrics(0))

    url = here["url"]
    assert url == stack.sims.steady.replica(4) + "/v1"
    assert (here["in_flight"], here["max_concurrency"], here["all_processes"]["in_flight"]) == (1, 1, 1)
    assert here["tokens_in_flight"] > 0
    assert here["queued"] == {"interactive": 2, "batch": 0}
    # The other process holds nothing there itself but sees what every process holds.
    assert (there["in_flight"], there["all_processes"]["in_flight"]) == (0, 1)

    assert sample(series, "gateway_queue_depth", provider="shown", priority="interactive") == 2
    assert sample(series, "gateway_queue_depth", provider="shown", priority="batch") == 0
    assert sample(series, "gateway_replica_in_flight", provider="shown", replica=url) == 1
    assert sample(series, "gateway_replica_tokens_in_flight", provider="shown", replica=url) > 0
    wait = {"provider": "shown", "priority": "interactive"}
    count, total = "gateway_queue_wait_seconds_count", "gateway_queue_wait_seconds_sum"
    assert sample(after, count, **wait) - sample(series, count, **wait) == 2  # the two that waited
    assert sample(after, total, **wait) > sample(series, total, **wait)
    assert sample(after, "gateway_queue_depth", provider="shown", priority="interactive") == 0
