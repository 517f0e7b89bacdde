"""A permit released in one process wakes the gates waiting for it in the others at once, through
the replica's channel, not at their next poll: with the poll set to an hour, they are still
granted. And after Redis was away, the subscription comes back.

`test_release_to_dispatch_across_two_processes` prints the figure, with the wake-up and with the
5 ms poll alone it replaces (what gates did before it)."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from structlog.testing import capture_logs

from gateway.redis.group_commit import PipelineBatcher
from gateway.routing.directives import Priority
from gateway.scheduling.gate import Grant, ReplicaGate
from gateway.scheduling.permits import Caps
from gateway.scheduling.redis.permits import UNHEARD_POLL_S, RedisPermits, replica_channel, replica_keys
from gateway.scheduling.ticket import Ticket
from tests.integration.scheduling.conftest import REDIS_URL, Processes, RedisLink, kill
from tests.integration.scheduling.test_redis_permits import DEADLINE_S, REPLICA, eventually
from tests.support.children import die_with_parent

pytestmark = pytest.mark.integration

CAPS = Caps(max_concurrency=1)
TICKET = Ticket("team", 1.0, Priority.INTERACTIVE, prompt_tokens=1, tokens=1)
AN_HOUR = 3600.0  # a poll that never comes within a test


def waiting_gate(bank: RedisPermits) -> tuple[ReplicaGate, asyncio.Task[Grant]]:
    gate = ReplicaGate("vllm", REPLICA, CAPS, bank, batch_share=0.1)
    return gate, asyncio.create_task(gate.enter(TICKET, timeout_s=AN_HOUR, queue_full=lambda: False))


async def wants(admin: Redis, process: str) -> bool:
    """Whether Redis has `process` waiting at the replica (a release then publishes)."""
    return await admin.hget(replica_keys(REPLICA)[2], process) is not None


async def test_a_release_in_one_process_wakes_a_gate_waiting_in_another(
    process: Processes, admin: Redis
) -> None:
    holder, waiter = process("holder"), process("waiter", poll_s=AN_HOUR)
    assert await holder.acquire(REPLICA, 1, CAPS, 0)
    _, entering = waiting_gate(waiter)
    await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)
    assert waiter.poll_s == AN_HOUR
    assert await eventually(lambda: wants(admin, "waiter"))

    holder.release(REPLICA, 1)

    grant = await asyncio.wait_for(entering, DEADLINE_S)  # not the hour's poll
    grant.release()


async def test_a_dead_processs_permits_dropped_by_one_process_wake_a_gate_in_another(
    process: Processes, admin: Redis
) -> None:
    caps = Caps(max_concurrency=2)
    dead, waiter, asker = process("dead", lease_s=1.0), process("waiter", poll_s=AN_HOUR), process("asker")
    assert [await dead.acquire(REPLICA, 1, caps, 0) for _ in range(2)] == [True, True]
    kill(dead)
    gate = ReplicaGate("vllm", REPLICA, caps, waiter, batch_share=0.1)
    entering = asyncio.create_task(gate.enter(TICKET, timeout_s=AN_HOUR, queue_full=lambda: False))
    await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)
    assert await eventually(lambda: wants(admin, "waiter"))
    await asyncio.sleep(1.5)  # the dead process's lease runs out; nothing has looked yet

    assert await asker.acquire(REPLICA, 1, caps, 0)  # drops what the dead process held

    grant = await asyncio.wait_for(entering, DEADLINE_S)  # not the hour's poll
    grant.release()


async def test_a_release_is_published_only_while_another_process_waits(process: Processes) -> None:
    replica = f"http://{uuid.uuid4().hex}:8000/v1"  # channels are the server's, not the db's
    alone, other = process("alone"), process("other")
    async with Redis.from_url(REDIS_URL) as client, client.pubsub(ignore_subscribe_messages=True) as pubsub:
        await pubsub.subscribe(replica_channel(replica))
        assert await alone.acquire(replica, 1, CAPS, 0)
        alone.release(replica, 1)
        assert await eventually(lambda: _no_permits(alone, replica))
        assert [m async for m in _drain(pubsub)] == []  # nobody else waited: nothing sent

        assert await alone.acquire(replica, 1, CAPS, 0)
        assert not await other.acquire(replica, 1, CAPS, 1)  # now another process waits
        alone.release(replica, 1)
        assert await eventually(lambda: _no_permits(alone, replica))
        assert [m["data"] async for m in _drain(pubsub)] == [b"alone"]


async def _no_permits(bank: RedisPermits, replica: str) -> bool:
    return (await bank.totals(replica)).in_flight == 0


async def _drain(pubsub: PubSub) -> AsyncIterator[dict[str, Any]]:
    while (message := await pubsub.get_message(timeout=0.2)) is not None:
        yield message


async def test_the_subscription_comes_back_after_redis_was_away(
    link: RedisLink, process: Processes, admin: Redis
) -> None:
    holder = process("holder")
    client = Redis.from_url(link.url, socket_connect_timeout=0.5)
    waiter = RedisPermits(client, PipelineBatcher(client), process="waiter", poll_s=AN_HOUR)
    waiter.start()
    try:
        assert await holder.acquire(REPLICA, 1, CAPS, 0)
        with capture_logs() as logs:
            waiting_gate(waiter)[1].cancel()  # registers the gate; it need not wait yet
            await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)
            await link.cut()
            assert await eventually(lambda: _deaf(waiter))
            assert waiter.poll_s == UNHEARD_POLL_S  # a release cannot reach it: it polls meanwhile
            await link.mend()
            await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)

            _, entering = waiting_gate(waiter)
            await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)  # subscribed for it too
            assert await eventually(lambda: wants(admin, "waiter"))
            holder.release(REPLICA, 1)
            grant = await asyncio.wait_for(entering, DEADLINE_S)
            grant.release()
        events = [entry["event"] for entry in logs]
        assert events.count("capacity_release_signals_lost") == 1
        assert events.count("capacity_release_signals_restored") == 1
    finally:
        await waiter.aclose()
        await client.aclose()


async def _deaf(bank: RedisPermits) -> bool:
    return not bank.listening.is_set()


class PollingPermits(RedisPermits):
    """What a gate did before the wake-up: no subscription, and a 5 ms poll."""

    def watch(self, replica: str, wake: object) -> None:
        pass

    @property
    def poll_s(self) -> float:
        return UNHEARD_POLL_S


async def test_release_to_dispatch_across_two_processes(admin: Redis) -> None:
    """Prints the figure; asserts only that every waiter was granted."""
    figures = {}
    for mode, bank_class in (("5 ms poll (before)", PollingPermits), ("wake-up (now)", RedisPermits)):
        client = Redis.from_url(REDIS_URL)
        bank = bank_class(client, PipelineBatcher(client), process="gateway", poll_s=AN_HOUR)
        bank.start()
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.scheduling.permit_holder",
            REDIS_URL,
            REPLICA,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        try:
            figures[mode] = await _release_to_dispatch(bank, holder, admin, rounds=100)
        finally:
            assert holder.stdin is not None
            holder.stdin.write(b"stop\n")
            await asyncio.wait_for(holder.wait(), DEADLINE_S)
            await bank.aclose()
            await client.aclose()
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for mode, latencies in figures.items():
        ms = sorted(1000 * s for s in latencies)
        print(
            f"release in one process -> dispatch in another, {mode}: median {statistics.median(ms):.2f} ms, "
            f"p90 {ms[int(0.9 * len(ms))]:.2f} ms, max {ms[-1]:.2f} ms ({len(ms)} releases)"
        )


async def _release_to_dispatch(
    bank: RedisPermits, holder: asyncio.subprocess.Process, admin: Redis, rounds: int
) -> list[float]:
    assert holder.stdin is not None and holder.stdout is not None
    gate = ReplicaGate("vllm", REPLICA, CAPS, bank, batch_share=0.1)
    if type(bank) is RedisPermits:
        await asyncio.wait_for(bank.listening.wait(), DEADLINE_S)
    latencies = []
    for _ in range(rounds):
        holder.stdin.write(b"hold\n")
        assert await asyncio.wait_for(holder.stdout.readline(), DEADLINE_S) == b"held\n"
        entering = asyncio.create_task(gate.enter(TICKET, timeout_s=DEADLINE_S, queue_full=lambda: False))
        assert await eventually(lambda: wants(admin, "gateway"))  # its gate waits in the queue
        holder.stdin.write(b"release\n")
        grant = await asyncio.wait_for(entering, DEADLINE_S)
        dispatched_at = time.time()
        line = await asyncio.wait_for(holder.stdout.readline(), DEADLINE_S)
        latencies.append(dispatched_at - float(line.split()[1]))
        grant.release()
    return latencies
