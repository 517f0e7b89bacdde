"""SIGKILL of one of two gateways under load: the survivor writes what the dead one held, exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from tests.faults.conftest import RECLAIM_IDLE_S, StackFactory, writer_pid
from tests.faults.load import SteadyLoad, served_ids, summary
from tests.faults.records import record_counts, report, wait_for_records

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

STREAM, GROUP = "gateway:usage", "writers"
RATE_PER_S = 40.0


async def pending_of(redis_url: str) -> dict[str, int]:
    """Entries read and not yet acked, per writer (consumer) of the metering stream."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        consumers = await client.xinfo_consumers(STREAM, GROUP)
    finally:
        await client.aclose()
    return {c["name"].decode(): int(c["pending"]) for c in consumers}


async def test_sigkill_of_one_gateway_loses_and_doubles_nothing(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=2)
    assert stack.redis_url is not None
    team_id, key = stack.new_team("sigkill")
    warmed = stack.warm(key)
    victim = stack.gateways[0]
    victim_consumer = stack.consumer_of(victim)
    postgres = stack.stores.postgres
    running = asyncio.create_task(SteadyLoad(stack.urls, key, RATE_PER_S).run(12.0))

    await asyncio.sleep(2.0)
    # With the database away, each writer holds the batch it read, unacked: the victim dies holding one.
    await asyncio.to_thread(postgres.stop)
    await asyncio.sleep(3.0)
    held = (await pending_of(stack.redis_url)).get(victim_consumer, 0)
    stack.kill(victim, signal.SIGKILL, with_writer=True)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(postgres.start)
    outcomes = await running

    served = served_ids(outcomes) | warmed
    records = await wait_for_records(stack.database_url, team_id, served)
    # The dead writer's entries are taken over once idle for RECLAIM_IDLE_S, then acked by the survivor.
    pending_after = await _settled_pending(stack.redis_url, victim_consumer)
    assert held > 0
    assert served - records.keys() == set()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    assert len(records) <= stack.stores.upstream.stats()["total"]
    assert pending_after == 0
    served_by_victim = {o.request_id for o in outcomes if o.status == 200 and o.target == victim.base_url}
    report(
        record_property,
        "sigkill",
        {
            "served": len(served),
            "served_by_killed": len(served_by_victim),
            "held_unacked_by_killed": held,
            "records": len(records),
            "reclaim_idle_s": RECLAIM_IDLE_S,
            **summary(outcomes),
        },
    )


async def _settled_pending(redis_url: str, consumer: str) -> int:
    """The consumer's pending count once reclaim has had its chance (bounded wait)."""
    for _ in range(100):
        pending = (await pending_of(redis_url)).get(consumer, 0)
        if pending == 0:
            return 0
        await asyncio.sleep(0.2)
    return pending


async def test_sigkill_of_a_writer_process_is_restarted_and_loses_nothing(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    """The writer process alone dies holding a batch: `gateway serve` starts another, and the
    batch is taken over once idle; every record once."""
    stack = fault_stack(gateways=1)
    assert stack.redis_url is not None
    team_id, key = stack.new_team("writer-sigkill")
    warmed = stack.warm(key)
    gateway = stack.gateways[0]
    assert gateway.process is not None
    killed = writer_pid(gateway.process.pid)
    assert killed is not None  # with Redis, `gateway serve` runs its writer as a process
    killed_consumer = stack.consumer_of(gateway)
    postgres = stack.stores.postgres
    running = asyncio.create_task(SteadyLoad(stack.urls, key, RATE_PER_S).run(10.0))

    await asyncio.sleep(2.0)
    await asyncio.to_thread(postgres.stop)  # the writer holds the batch it read, unacked
    await asyncio.sleep(2.0)
    held = (await pending_of(stack.redis_url)).get(killed_consumer, 0)
    os.kill(killed, signal.SIGKILL)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(postgres.start)
    outcomes = await running

    served = served_ids(outcomes) | warmed
    records = await wait_for_records(stack.database_url, team_id, served)
    restarted = writer_pid(gateway.process.pid)
    pending_after = await _settled_pending(stack.redis_url, killed_consumer)
    assert held > 0
    assert restarted is not None and restarted != killed
    assert served - records.keys() == set()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    assert pending_after == 0
    report(
        record_property,
        "writer_sigkill",
        {"served": len(served), "held_unacked_by_killed": held, "records": len(records), **summary(outcomes)},
    )
