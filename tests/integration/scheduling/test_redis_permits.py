"""RedisPermits on a real Redis: caps hold across processes, a dead process's permits come back,
the cap is shared between the processes that want it, and this process's counts win over drift."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from structlog.testing import capture_logs

from gateway.redis.group_commit import PipelineBatcher
from gateway.scheduling.permits import Caps, PermitTotals
from gateway.scheduling.redis.permits import RedisPermits, replica_keys
from tests.integration.scheduling.conftest import Processes, RedisLink, kill

pytestmark = pytest.mark.integration

REPLICA = "http://10.0.0.5:8000/v1"
DEADLINE_S = 10.0  # what "comes back" may take at most here, on a slow machine too


async def eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Whether `check()` held before the deadline, asked every 50 ms."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def totals_are(bank: RedisPermits, in_flight: int, tokens: int) -> bool:
    totals = await bank.totals(REPLICA)
    return (totals.in_flight, totals.tokens) == (in_flight, tokens)


async def logged(logs: list[MutableMapping[str, Any]], event: str) -> bool:
    return any(entry["event"] == event for entry in logs)


async def grants(bank: RedisPermits, count: int, caps: Caps, tokens: int = 1, waiting: int = 0) -> list[bool]:
    return [await bank.acquire(REPLICA, tokens, caps, waiting) for _ in range(count)]


async def test_concurrent_acquires_from_two_processes_never_exceed_the_cap(process: Processes) -> None:
    banks = [process("a"), process("b")]
    caps = Caps(max_concurrency=5)
    holding, most = 0, 0

    async def request(bank: RedisPermits) -> None:
        nonlocal holding, most
        while not await bank.acquire(REPLICA, 10, caps, waiting=0):
            await asyncio.sleep(0.001)
        holding += 1
        most = max(most, holding)
        await asyncio.sleep(0.005)  # the upstream answering
        holding -= 1
        bank.release(REPLICA, 10)

    await asyncio.gather(*(request(banks[i % 2]) for i in range(200)))

    assert most == 5  # every request got through, and never more than the cap at once
    assert await eventually(lambda: totals_are(banks[0], 0, 0))


async def test_a_burst_of_acquires_from_two_processes_is_granted_exactly_the_cap(process: Processes) -> None:
    banks = [process("a"), process("b")]
    caps = Caps(max_concurrency=7)

    granted = await asyncio.gather(*(banks[i % 2].acquire(REPLICA, 1, caps, 0) for i in range(60)))

    assert sum(granted) == 7
    assert await banks[1].totals(REPLICA) == PermitTotals(in_flight=7, tokens=7, processes=2)


async def test_a_release_makes_room_for_the_next_acquire(process: Processes) -> None:
    a, b = process("a"), process("b")
    caps = Caps(max_concurrency=2)

    assert await grants(a, 3, caps) == [True, True, False]
    assert not await b.acquire(REPLICA, 1, caps, 0)
    a.release(REPLICA, 1)
    assert await a.acquire(REPLICA, 1, caps, 0)  # queued after the release: sees it
    a.release(REPLICA, 1)

    assert await eventually(lambda: b.acquire(REPLICA, 1, caps, 0))


async def test_tokens_in_flight_are_capped_and_a_request_larger_than_the_cap_goes_alone(
    process: Processes,
) -> None:
    a, b = process("a"), process("b")
    caps = Caps(max_tokens_in_flight=100)

    assert await a.acquire(REPLICA, 60, caps, 0)
    assert not await b.acquire(REPLICA, 50, caps, 0)
    assert await b.acquire(REPLICA, 40, caps, 0)
    assert not await a.acquire(REPLICA, 1, caps, 0)
    a.release(REPLICA, 60)
    b.release(REPLICA, 40)
    assert await eventually(lambda: totals_are(a, 0, 0))

    assert await b.acquire(REPLICA, 500, caps, 0)  # nothing else in flight: it goes
    assert not await a.acquire(REPLICA, 1, caps, 0)
    b.release(REPLICA, 500)
    assert await eventually(lambda: a.acquire(REPLICA, 1, caps, 0))


async def test_concurrent_token_holds_fill_the_token_cap_exactly(process: Processes) -> None:
    banks = [process("a"), process("b")]
    caps = Caps(max_tokens_in_flight=100)

    granted = await asyncio.gather(*(banks[i % 2].acquire(REPLICA, 30, caps, 0) for i in range(40)))

    assert sum(granted) == 3
    assert (await banks[0].totals(REPLICA)).tokens == 90


async def test_a_killed_processs_permits_come_back_after_its_lease(process: Processes) -> None:
    dead, alive = process("dead", lease_s=1.0), process("alive", lease_s=1.0)
    caps = Caps(max_concurrency=3)
    assert await grants(dead, 3, caps) == [True] * 3

    kill(dead)

    taken = 0

    async def take_one() -> bool:
        nonlocal taken
        taken += await alive.acquire(REPLICA, 1, caps, 0)
        return taken == 3

    assert await eventually(take_one)  # the whole cap, the dead process's share included
    assert await alive.totals(REPLICA) == PermitTotals(in_flight=3, tokens=3, processes=1)


async def test_a_live_process_keeps_its_permits_beyond_its_lease(process: Processes) -> None:
    holder, other = process("holder", lease_s=1.0), process("other", lease_s=1.0)
    caps = Caps(max_concurrency=2)
    assert await grants(holder, 2, caps) == [True, True]

    await asyncio.sleep(2.5)  # two and a half leases, renewed in the background

    assert not await other.acquire(REPLICA, 1, caps, 0)
    assert (await other.totals(REPLICA)).in_flight == 2


async def test_a_process_re_acquiring_the_whole_cap_yields_to_a_waiting_one(process: Processes) -> None:
    a, b = process("a"), process("b")
    caps = Caps(max_concurrency=4)
    assert await grants(a, 4, caps, waiting=1) == [True] * 4
    assert not await b.acquire(REPLICA, 1, caps, waiting=1)

    a.release(REPLICA, 1)

    assert not await a.acquire(REPLICA, 1, caps, waiting=5)  # a holds its share; b is owed one
    assert await b.acquire(REPLICA, 1, caps, waiting=1)


async def test_a_long_queue_does_not_round_its_share_up_to_the_whole_cap(process: Processes) -> None:
    """a wants 8 + 100, b wants 1: a's share is 7 of 8 (not ceil(7.9) = 8), so b gets its one."""
    a, b = process("a"), process("b")
    caps = Caps(max_concurrency=8)
    assert await grants(a, 8, caps, waiting=100) == [True] * 8
    assert not await b.acquire(REPLICA, 1, caps, waiting=1)

    a.release(REPLICA, 1)

    assert not await a.acquire(REPLICA, 1, caps, waiting=100)
    assert await b.acquire(REPLICA, 1, caps, waiting=1)


async def test_a_free_permit_no_waiting_process_is_owed_goes_to_one_at_its_share(process: Processes) -> None:
    """Cap 5, demand a 2 + 2, b 2 + 1: shares 2 and 2. b holds its share, so the fifth permit is
    a's even though a holds its share too: no permit idles while someone waits."""
    a, b = process("a"), process("b")
    caps = Caps(max_concurrency=5)
    assert await grants(a, 2, caps, waiting=3) == [True, True]
    assert await grants(b, 2, caps, waiting=2) == [True, True]

    assert await a.acquire(REPLICA, 1, caps, waiting=2)
    assert (await a.totals(REPLICA)).in_flight == 5


async def test_a_want_nobody_restates_lapses(process: Processes) -> None:
    a, b = process("a", lease_s=1.0), process("b", lease_s=1.0)
    caps = Caps(max_concurrency=2)
    assert await grants(a, 2, caps, waiting=1) == [True, True]
    assert not await b.acquire(REPLICA, 1, caps, waiting=1)  # b waits ... then its request leaves
    a.release(REPLICA, 1)
    assert not await a.acquire(REPLICA, 1, caps, waiting=3)

    assert await eventually(lambda: a.acquire(REPLICA, 1, caps, waiting=3))


async def test_aclose_gives_the_permits_back_at_once(process: Processes) -> None:
    leaving, staying = process("leaving"), process("staying")
    caps = Caps(max_concurrency=3)
    assert await grants(leaving, 3, caps) == [True] * 3

    await leaving.aclose()

    assert await grants(staying, 4, caps) == [True, True, True, False]
    assert (await staying.totals(REPLICA)).processes == 1


@pytest.mark.parametrize("drift", ["lost", "extra"])
async def test_the_renewal_restates_this_processs_exact_counts(
    process: Processes, admin: Redis, drift: str
) -> None:
    bank = process("a", lease_s=1.0)
    assert await grants(bank, 2, Caps(max_concurrency=10), tokens=7) == [True, True]
    held, tokens, _, _ = replica_keys(REPLICA)
    if drift == "lost":  # a Redis restart that lost its last writes
        await admin.hdel(held, "a")
        await admin.hdel(tokens, "a")
    else:  # a release lost in a Redis blip
        await admin.hset(held, "a", 3)
        await admin.hset(tokens, "a", 21)
    assert not await totals_are(bank, 2, 14)

    assert await eventually(lambda: totals_are(bank, 2, 14))


async def test_scripts_flushed_from_redis_are_loaded_again(process: Processes, admin: Redis) -> None:
    bank = process("a")
    caps = Caps(max_concurrency=2)
    assert await bank.acquire(REPLICA, 5, caps, 0)

    await admin.script_flush()
    assert await bank.acquire(REPLICA, 5, caps, 0)
    assert not await bank.acquire(REPLICA, 5, caps, 0)

    await admin.script_flush()
    bank.release(REPLICA, 5)
    assert await eventually(lambda: totals_are(bank, 1, 5))


async def test_releases_lost_in_an_outage_are_made_good_once_redis_answers_again(
    link: RedisLink, admin: Redis
) -> None:
    client = Redis.from_url(link.url, socket_connect_timeout=0.5)
    bank = RedisPermits(client, PipelineBatcher(client), lease_s=1.0, process="cut-off")
    bank.start()
    caps = Caps(max_concurrency=5)
    assert await grants(bank, 3, caps, tokens=10) == [True] * 3
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        with capture_logs() as logs:
            await link.cut()
            with pytest.raises((RedisError, OSError)):  # the caller counts locally meanwhile
                await bank.acquire(REPLICA, 10, caps, 0)
            bank.release(REPLICA, 10)
            bank.release(REPLICA, 10)
            assert await eventually(lambda: logged(logs, "capacity_permit_writes_failing"))
            await asyncio.sleep(1.0)  # renewals fail meanwhile, and the lease runs out
            await link.mend()

            assert await eventually(lambda: totals_are(bank, 1, 10))
        await bank.aclose()
        gc.collect()  # a failed reply nobody consumed would be reported now
    finally:
        loop.set_exception_handler(previous)
        await client.aclose()

    assert unhandled == []
    events = [entry["event"] for entry in logs]
    assert events.count("capacity_permit_writes_failing") == 1
    assert events.count("capacity_permit_writes_restored") == 1
    assert not await admin.exists(*replica_keys(REPLICA))  # aclose left nothing behind


async def test_aclose_with_redis_out_of_reach_leaves_the_permits_to_their_lease(link: RedisLink) -> None:
    client = Redis.from_url(link.url, socket_connect_timeout=0.5)
    bank = RedisPermits(client, PipelineBatcher(client), process="cut-off")
    assert await bank.acquire(REPLICA, 1, Caps(max_concurrency=1), 0)
    await link.cut()

    with capture_logs() as logs:
        await bank.aclose()
    await client.aclose()

    assert [entry["event"] for entry in logs] == ["capacity_permits_left"]
