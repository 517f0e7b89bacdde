"""A replica's gate counting this process's requests alone: caps hold, the queue's order, timeouts, give-ups."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.errors import QueueFull, QueueTimeout
from gateway.providers.base import TokenUsage
from gateway.routing.directives import Priority
from gateway.scheduling.gate import Grant, ReplicaGate
from gateway.scheduling.permits import Caps
from gateway.scheduling.server_load import ServerLoad
from gateway.scheduling.ticket import Ticket
from gateway.settings import SchedulingSettings

URL = "http://replica:8000/v1"


def gate(caps: Caps) -> ReplicaGate:
    return ReplicaGate("vllm", URL, caps, batch_share=0.1)


def ticket(team: str = "t", tokens: int = 10, priority: Priority = Priority.INTERACTIVE) -> Ticket:
    return Ticket(team, 1.0, priority, tokens, tokens)


def never_full() -> bool:
    return False


async def test_the_cap_holds_and_every_request_is_served() -> None:
    replica = gate(Caps(max_concurrency=3))
    running, most = 0, 0

    async def request() -> None:
        nonlocal running, most
        grant = await replica.enter(ticket(), 10.0, never_full)
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1
        grant.release()

    await asyncio.gather(*(request() for _ in range(40)))
    assert most == 3
    assert replica.in_flight == 0 and not replica.queue


async def test_a_request_that_waits_too_long_is_refused_and_leaves_the_queue() -> None:
    replica = gate(Caps(max_concurrency=1))
    held = await replica.enter(ticket(), 1.0, never_full)
    with pytest.raises(QueueTimeout) as refused:
        await replica.enter(ticket(), 0.05, never_full)
    assert refused.value.status == 429 and refused.value.headers["retry-after"]
    assert not replica.queue
    held.release()
    again = await replica.enter(ticket(), 1.0, never_full)  # the cap is whole again
    again.release()


async def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    replica = gate(Caps(max_concurrency=1))
    held = await replica.enter(ticket(), 1.0, never_full)
    leaving = asyncio.create_task(replica.enter(ticket("a"), 5.0, never_full))
    staying = asyncio.create_task(replica.enter(ticket("b"), 5.0, never_full))
    await asyncio.sleep(0.01)
    leaving.cancel()
    held.release()
    grant = await asyncio.wait_for(staying, 1.0)
    assert grant.ticket is not None and grant.ticket.team_id == "b"
    assert leaving.cancelled()
    grant.release()
    assert replica.in_flight == 0


async def test_interactive_work_overtakes_queued_batch_work() -> None:
    replica = gate(Caps(max_concurrency=1))
    held = await replica.enter(ticket(), 1.0, never_full)
    order: list[str] = []

    async def request(name: str, priority: Priority) -> None:
        grant = await replica.enter(ticket(name, priority=priority), 5.0, never_full)
        order.append(name)
        grant.release()

    batch = [asyncio.create_task(request(f"batch-{i}", Priority.BATCH)) for i in range(3)]
    await asyncio.sleep(0.01)
    interactive = asyncio.create_task(request("interactive", Priority.INTERACTIVE))
    await asyncio.sleep(0.01)
    held.release()
    await asyncio.gather(*batch, interactive)
    assert order[0] == "interactive"


async def test_the_token_cap_waits_for_room_and_an_oversized_request_goes_alone() -> None:
    replica = gate(Caps(max_tokens_in_flight=100))
    first = await replica.enter(ticket(tokens=80), 1.0, never_full)
    second = asyncio.create_task(replica.enter(ticket(tokens=30), 5.0, never_full))
    await asyncio.sleep(0.01)
    assert not second.done()
    first.release()
    granted = await asyncio.wait_for(second, 1.0)
    granted.release()
    alone = await replica.enter(ticket(tokens=500), 1.0, never_full)
    assert replica.tokens_in_flight == 500
    alone.release()


async def test_a_full_queue_refuses_at_once() -> None:
    replica = gate(Caps(max_concurrency=1))
    held = await replica.enter(ticket(), 1.0, never_full)
    with pytest.raises(QueueFull):
        await replica.enter(ticket(), 1.0, lambda: True)
    held.release()


async def test_the_real_usage_is_charged_to_the_team() -> None:
    replica = gate(Caps(max_concurrency=1))
    grant: Grant = await replica.enter(ticket("heavy", tokens=10), 1.0, never_full)
    waiting = [
        asyncio.create_task(replica.enter(ticket(team, tokens=10), 5.0, never_full))
        for team in ("heavy", "light", "light")
    ]
    await asyncio.sleep(0.01)
    # The first request used 5,000 tokens: both light requests go before heavy's next one.
    grant.release(TokenUsage(prompt_tokens=10, completion_tokens=5000))
    served = []
    for _ in range(3):
        done, _ = await asyncio.wait(
            [t for t in waiting if t not in served], return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            served.append(task)
            task.result().release()
    teams = [t.result().ticket.team_id for t in served]  # type: ignore[union-attr]
    assert teams[:2] == ["light", "light"]


async def test_batch_work_leaves_the_interactive_reserve_free_while_interactive_work_is_about() -> None:
    replica = ReplicaGate(
        "vllm", URL, Caps(max_concurrency=20), batch_share=0.1, interactive_reserve=0.05, reserve_idle_s=60
    )
    seen = await replica.enter(ticket(), 1.0, never_full)  # interactive work was here a moment ago
    seen.release()
    batch = [await replica.enter(ticket(priority=Priority.BATCH), 1.0, never_full) for _ in range(19)]
    waiting = asyncio.create_task(replica.enter(ticket(priority=Priority.BATCH), 5.0, never_full))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the 20th slot is kept
    interactive = await asyncio.wait_for(replica.enter(ticket(), 1.0, never_full), 0.5)
    assert replica.in_flight == 20
    interactive.release()
    batch.pop().release()
    (await asyncio.wait_for(waiting, 1.0)).release()
    for grant in batch:
        grant.release()


async def test_the_reserve_is_lent_to_batch_work_while_no_interactive_work_is_about() -> None:
    """Work-conserving: the reserve idles for nobody. Once lent, an interactive arrival takes the
    next free slot before the batch work waiting with it."""
    replica = ReplicaGate(
        "vllm", URL, Caps(max_concurrency=20), batch_share=0.1, interactive_reserve=0.05, reserve_idle_s=0
    )
    batch = [await replica.enter(ticket(priority=Priority.BATCH), 1.0, never_full) for _ in range(20)]
    assert replica.in_flight == 20
    queued_batch = asyncio.create_task(replica.enter(ticket(priority=Priority.BATCH), 5.0, never_full))
    await asyncio.sleep(0.01)
    interactive = asyncio.create_task(replica.enter(ticket(), 5.0, never_full))
    await asyncio.sleep(0.01)
    assert not interactive.done() and not queued_batch.done()
    batch.pop().release()
    (await asyncio.wait_for(interactive, 1.0)).release()
    assert not queued_batch.done()  # the interactive work was about when the slot came back
    batch.pop().release()
    (await asyncio.wait_for(queued_batch, 1.0)).release()
    for grant in batch:
        grant.release()


def prefixed(prompt: int, output: int = 64, team: str = "t") -> Ticket:
    return Ticket(team, 1.0, Priority.BATCH, prompt, prompt + output, "system", 2048)


async def test_a_token_cap_counts_a_prefix_in_flight_once() -> None:
    replica = gate(Caps(max_tokens_in_flight=3000))
    grants = []
    while True:
        try:
            grants.append(await replica.enter(prefixed(2100), 0.01, never_full))
        except QueueTimeout:
            break
    assert len(grants) == 1 + (3000 - 2164) // 116  # the first carries the prefix, the rest 116 each
    assert replica.tokens_in_flight == 2164 + 7 * 116
    for grant in grants:
        grant.release()
    assert replica.tokens_in_flight == 0 and replica.in_flight == 0


class CountingBank:
    """A shared bank that grants everything and counts the tokens asked for and given back."""

    def __init__(self) -> None:
        self.acquired = self.released = 0

    async def acquire(self, replica: str, tokens: int, caps: Caps, waiting: int) -> bool:
        self.acquired += tokens
        return True

    def release(self, replica: str, tokens: int) -> None:
        self.released += tokens

    def watch(self, replica: str, wake: object) -> None:
        pass

    poll_s = 1.0


async def test_a_shared_bank_gets_back_what_it_was_charged() -> None:
    bank = CountingBank()
    replica = ReplicaGate("vllm", URL, Caps(max_tokens_in_flight=10_000), bank, batch_share=0.1)  # type: ignore[arg-type]
    grants = [await replica.enter(prefixed(2100 + i), 1.0, never_full) for i in range(5)]
    assert bank.acquired == 2164 + (117 + 118 + 119 + 120)
    for grant in (grants[2], grants[0], grants[4], grants[1], grants[3]):
        grant.release()
    assert bank.released == bank.acquired


async def test_a_short_request_passes_a_long_head_whose_tokens_do_not_fit_yet() -> None:
    replica = gate(Caps(max_tokens_in_flight=5000))
    holding = await replica.enter(ticket("x", tokens=3000), 1.0, never_full)
    long = asyncio.create_task(replica.enter(ticket("a", tokens=3000), 5.0, never_full))
    await asyncio.sleep(0.01)
    short = asyncio.create_task(replica.enter(ticket("b", tokens=500), 5.0, never_full))
    await asyncio.sleep(0.01)
    assert short.done() and not long.done()
    short.result().release()
    holding.release()
    (await asyncio.wait_for(long, 1.0)).release()


async def test_the_prompt_estimate_is_checked_against_the_servers_count_when_a_request_ends() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503))) as client:
        load = ServerLoad("http://replica:8000/metrics", SchedulingSettings(), client)
        replica = ReplicaGate("vllm", URL, Caps(), batch_share=0.1, load=load)
        load.in_flight = replica.held
        for _ in range(100):
            grant = await replica.enter(ticket(tokens=4000), 1.0, never_full)
            grant.release(TokenUsage(prompt_tokens=5000, completion_tokens=10))
    assert 1.2 < load.capacity.prompt_ratio <= 1.25


class SlowBank(CountingBank):
    """A shared bank whose answer never comes."""

    async def acquire(self, replica: str, tokens: int, caps: Caps, waiting: int) -> bool:
        await asyncio.Event().wait()
        return True


async def test_a_request_cancelled_while_the_bank_is_asked_is_not_counted_in_flight() -> None:
    replica = ReplicaGate("vllm", URL, Caps(max_concurrency=4), SlowBank(), batch_share=0.1)  # type: ignore[arg-type]
    asking = asyncio.create_task(replica.enter(prefixed(2100), 5.0, never_full))
    await asyncio.sleep(0.01)
    assert replica.in_flight == 1  # counted while asked for: arrivals meanwhile see it
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    assert replica.in_flight == 0 and replica.tokens_in_flight == 0


async def test_batch_work_waits_for_an_interactive_requests_first_token() -> None:
    replica = ReplicaGate("vllm", URL, Caps(max_concurrency=20), batch_share=0.1, prefill_guard_s=5.0)
    interactive = await replica.enter(ticket(), 1.0, never_full)
    batch = asyncio.create_task(replica.enter(ticket(priority=Priority.BATCH), 5.0, never_full))
    await asyncio.sleep(0.05)
    assert not batch.done()  # free slots, but the interactive prompt is being prefilled
    interactive.first_token()
    (await asyncio.wait_for(batch, 1.0)).release()
    interactive.release()


async def test_the_prefill_guard_holds_batch_work_for_its_window_at_most() -> None:
    """An interactive request whose first token never comes (or a steady stream of them) cannot
    starve batch work: the window is counted from the first one sent."""
    replica = ReplicaGate("vllm", URL, Caps(max_concurrency=20), batch_share=0.1, prefill_guard_s=0.1)
    interactive = await replica.enter(ticket(), 1.0, never_full)
    batch = asyncio.create_task(replica.enter(ticket(priority=Priority.BATCH), 5.0, never_full))
    await asyncio.sleep(0.03)
    another = await replica.enter(ticket(), 1.0, never_full)  # sent within the window: no new one
    assert not batch.done()
    (await asyncio.wait_for(batch, 1.0)).release()  # the window's end wakes the queue
    for grant in (interactive, another):
        grant.release()


async def test_an_ended_interactive_request_ends_the_guard() -> None:
    replica = ReplicaGate("vllm", URL, Caps(max_concurrency=20), batch_share=0.1, prefill_guard_s=5.0)
    interactive = await replica.enter(ticket(), 1.0, never_full)
    batch = asyncio.create_task(replica.enter(ticket(priority=Priority.BATCH), 5.0, never_full))
    await asyncio.sleep(0.02)
    assert not batch.done()
    interactive.release()  # it failed before its first token, say
    (await asyncio.wait_for(batch, 1.0)).release()
